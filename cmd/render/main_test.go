package main

import (
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"render": main})
}

// The command as a user meets it: flags, messages, exit codes, files left
// behind. Each testdata/script/*.txtar is one scenario.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{Dir: "testdata/script"})
}
