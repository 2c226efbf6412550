package version

import (
	"runtime/debug"
	"testing"
)

func TestFromSettings(t *testing.T) {
	for _, c := range []struct {
		settings []debug.BuildSetting
		want     string
	}{
		{nil, "dev"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}}, "dev-0123456789ab"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}}, "dev-abc-dirty"},
		{[]debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}, "dev"},
	} {
		if got := fromSettings(c.settings); got != c.want {
			t.Errorf("fromSettings(%v) = %q, want %q", c.settings, got, c.want)
		}
	}
}

func TestStamped(t *testing.T) {
	old := version
	defer func() { version = old }()
	version = "0.3.0-12-gabc1234"
	if got := Line("fetch"); got != "fetch 0.3.0-12-gabc1234" {
		t.Errorf("Line = %q", got)
	}
}
