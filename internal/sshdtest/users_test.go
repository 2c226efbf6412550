package sshdtest

import (
	"errors"
	"os"
	"os/exec"
	"os/user"
	"strings"
	"testing"
)

// A user EnsureUser made is gone, with its home, when the last test
// holding it ends; a user that was there before stays, with the shell and
// the (locked) password it had.
func TestEnsureUserLeavesNothingBehind(t *testing.T) {
	Require(t)
	const madeName, keptName = "sdtmade", "sdtkept"
	for _, name := range []string{madeName, keptName} {
		if _, err := user.Lookup(name); err == nil {
			t.Fatalf("user %s exists before the test (left by an older run?)", name)
		}
	}
	if out, err := exec.Command("useradd", "--shell", "/usr/sbin/nologin", keptName).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", keptName).Run() })
	var home string
	t.Run("holding", func(t *testing.T) {
		EnsureUser(t, madeName)
		EnsureUser(t, madeName) // twice in one test: one removal, at the end
		EnsureUser(t, keptName)
		u, err := user.Lookup(madeName)
		if err != nil {
			t.Fatal(err)
		}
		home = u.HomeDir
		if _, err := os.Stat(home); err != nil {
			t.Errorf("no home: %v", err)
		}
		if e, _ := passwdEntry(keptName); e.shell != "/bin/sh" {
			t.Errorf("%s's shell while held: %q", keptName, e.shell)
		}
		if p, _ := shadowPassword(keptName); strings.HasPrefix(p, "!") {
			t.Errorf("%s still locked while held: %q", keptName, p)
		}
	})
	var unknown user.UnknownUserError
	if _, err := user.Lookup(madeName); !errors.As(err, &unknown) {
		t.Errorf("user %s after its tests: %v, want it removed", madeName, err)
	}
	if _, err := os.Stat(home); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("home %s after the tests: %v, want it removed", home, err)
	}
	e, err := passwdEntry(keptName)
	if err != nil {
		t.Fatalf("user %s, there before the tests, was removed: %v", keptName, err)
	}
	if e.shell != "/usr/sbin/nologin" {
		t.Errorf("%s's shell after the tests: %q, want it back", keptName, e.shell)
	}
	if p, _ := shadowPassword(keptName); !strings.HasPrefix(p, "!") {
		t.Errorf("%s's password after the tests: %q, want it locked again", keptName, p)
	}
}
