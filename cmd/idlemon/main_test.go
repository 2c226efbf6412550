package main

import (
	"testing"

	"github.com/gpumon/gpumon/internal/testenv"
	"github.com/rogpeppe/go-internal/testscript"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"idlemon": main})
}

// scriptT is the key of the script's *testing.T in testscript.Env.Values.
type scriptT struct{}

// The command as a user meets it: flags, messages, exit codes. Each
// testdata/script/*.txtar is one scenario. A script that starts with
// needroot is skipped when not run as root (fails under CI: testenv.Need).
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			env.Values[scriptT{}] = env.T()
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"needroot": needRoot,
		},
	})
}

// needRoot is the script command needroot: idlemon refuses `user = root`
// unless it runs as root, so scripts whose configs name root need it.
func needRoot(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) > 0 {
		ts.Fatalf("usage: needroot")
	}
	t, ok := ts.Value(scriptT{}).(testing.TB)
	if !ok {
		ts.Fatalf("needroot: no testing.TB for this script")
	}
	testenv.NeedRoot(t)
}
