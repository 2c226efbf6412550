// Package packaging holds no code: its tests check what `make deb` builds
// from dist/deb (nfpm's package descriptions): that every file they name is
// in the repository; what the packages, built by the test with `make deb
// ARCHES=GOARCH`, hold (dpkg-deb -c, -I) and that their binaries are
// stamped; and what gpumon's maintainer scripts make, run as root on a copy
// of this machine's /etc.
package packaging
