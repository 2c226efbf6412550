package inifile

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLines(t *testing.T) {
	src := "stray = 1\n; comment\n[common]\nUser = alice\nhosts = a,\n  b\n# hosts = again\n\n[render]\ntitle: Lab\nuser = x\nuser = y\n"
	want := map[string]int{
		"DEFAULT.stray": 1,
		"common.":       3,
		"common.user":   4,
		"common.hosts":  5,
		"render.":       9,
		"render.title":  10,
		"render.user":   11,
	}
	if diff := cmp.Diff(want, Lines([]byte(src))); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
