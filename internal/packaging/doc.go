// Package packaging holds no code: its tests check what `make deb` builds
// from dist/deb (nfpm's package descriptions): that every file they name is
// in the repository, and, given a built bin/gpumon_*_ARCH.deb, what the
// packages hold (dpkg-deb -c, -I) and that their binaries are stamped.
package packaging
