// Package version says which gpumon a binary is. `make dist` and `make deb`
// stamp it with
//
//	-ldflags '-X github.com/gpumon/gpumon/internal/version.version=0.3.0-12-gabc1234'
//
// from `git describe --tags --always --dirty`; a plain `go build` leaves it
// empty, and String falls back to the VCS revision Go recorded in the binary
// (when built with -buildvcs), else "dev".
package version

import "runtime/debug"

// version is set by the linker (-X); empty in a plain build.
var version string

// String is the version: the stamped one, else "dev" with the recorded VCS
// revision (e.g. "dev-abc1234def56", "dev-abc1234def56-dirty"), else "dev".
func String() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	return fromSettings(info.Settings)
}

func fromSettings(settings []debug.BuildSetting) string {
	var rev string
	var dirty bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	v := "dev-" + rev[:min(len(rev), 12)]
	if dirty {
		v += "-dirty"
	}
	return v
}

// Line is what `PROG -version` prints: "fetch 0.3.0-12-gabc1234".
func Line(prog string) string {
	return prog + " " + String()
}
