package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/simfleet"
	"github.com/gpumon/gpumon/internal/simfleet/fleetproc"
	"github.com/rogpeppe/go-internal/testscript"
)

func TestMain(m *testing.M) {
	fleetproc.ServeIfChild() // BenchmarkLive's simulated fleet, in a process of its own
	testscript.Main(m, map[string]func(){"fetch": main, "simfleet": simfleetMain})
}

// The command as a user meets it: flags, messages, exit codes, files left
// behind. Each testdata/script/*.txtar is one scenario.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			env.Setenv("SSH_AUTH_SOCK", "")
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"waitfor":     waitFor,
			"sigterm-pid": sigtermPID,
			"sighup-pid":  sighupPID,
		},
	})
}

// simfleetMain is "simfleet DIR N": N simulated hosts, their client files
// (config.ini and the rest) written into DIR, until SIGTERM or SIGINT.
func simfleetMain() {
	n, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "simfleet: N:", err)
		os.Exit(2)
	}
	f, err := simfleet.Launch(simfleet.Generate(n, 1))
	if err != nil {
		fmt.Fprintln(os.Stderr, "simfleet:", err)
		os.Exit(1)
	}
	defer f.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	if _, err := f.WriteClientFiles(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "simfleet:", err)
		os.Exit(1)
	}
	<-sig
}

// waitFor is "waitfor FILE": it returns once FILE exists, and fails the
// script if it does not within a minute (the machine may be loaded).
func waitFor(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitfor FILE")
	}
	path := ts.MkAbs(args[0])
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("%s did not appear within a minute", filepath.Base(path))
		}
	}
}

// sigtermPID is "sigterm-pid FILE": SIGTERM, as systemctl stop sends it, to
// the process whose pid FILE holds (fetch's lock file names its holder).
// testscript's own kill sends only KILL and INT.
func sigtermPID(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: sigterm-pid FILE")
	}
	holder := strings.Fields(ts.ReadFile(args[0])) // "PID" or "PID live"
	if len(holder) == 0 {
		ts.Fatalf("%s is empty", args[0])
	}
	pid, err := strconv.Atoi(holder[0])
	if err != nil {
		ts.Fatalf("%s: %v", args[0], err)
	}
	ts.Check(syscall.Kill(pid, syscall.SIGTERM))
}

// sighupPID is "sighup-pid FILE": SIGHUP to the fetch whose lock FILE is.
func sighupPID(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: sighup-pid FILE")
	}
	holder := strings.Fields(ts.ReadFile(args[0]))
	if len(holder) == 0 {
		ts.Fatalf("%s is empty", args[0])
	}
	pid, err := strconv.Atoi(holder[0])
	if err != nil {
		ts.Fatalf("%s: %v", args[0], err)
	}
	ts.Check(syscall.Kill(pid, syscall.SIGHUP))
}
