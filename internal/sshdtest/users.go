package sshdtest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/testenv"
)

// Users the tests log in as are made with useradd and removed again when
// the last test that holds them ends, in this process and every other test
// binary (go test runs packages at once): a machine where the tests ran
// keeps no account of theirs (gpumon's package would take a leftover
// "gpumon" for its own). An account that was there before is never
// removed; what EnsureUser changed on it (shell, a locked password) is
// put back.
//
// usersDir holds the lock that serialises useradd/usermod/userdel across
// test binaries (they fail while another holds /etc/passwd's lock), a file
// per process holding a user (NAME.PID), and the shell and password of an
// account that was there before (NAME.orig).
const usersDir = "/tmp/sshdtest-users"

// madeComment is the comment (GECOS) field of an account EnsureUser made:
// how any later run, even after a crash, tells it from one it must keep.
const madeComment = "gpumon sshdtest user, removed when its tests end"

var (
	usersMu sync.Mutex
	held    = map[string]int{} // tests of this process holding each user
)

// EnsureUser makes sure a local user name exists (useradd with a home and
// /bin/sh when missing) and can log in with a key: useradd leaves the account
// locked ("!"), and sshd without PAM refuses keys for locked accounts, so the
// password field becomes "*". When the last test holding it ends, a user it
// made is removed with its home, and one that was there before gets its
// shell and password back. Keep names at most 8 characters if tests read
// them back from `ps -o user=` (ps prints the uid for longer ones).
func EnsureUser(t testing.TB, name string) {
	t.Helper()
	EnsureUserShell(t, name, "/bin/sh")
}

// EnsureUserShell is EnsureUser with the given login shell (set with usermod
// when the user exists with another one).
func EnsureUserShell(t testing.TB, name, shell string) {
	t.Helper()
	if euid := os.Geteuid(); euid != 0 {
		testenv.Need(t, fmt.Sprintf("sshdtest: EnsureUser(%q) needs root (euid %d)", name, euid))
	}
	unlock, err := lockUsers()
	if err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	defer unlock()
	if held[name] == 0 {
		if err := os.WriteFile(holderFile(name, os.Getpid()), nil, 0o600); err != nil {
			t.Fatalf("sshdtest: %v", err)
		}
	}
	held[name]++
	t.Cleanup(func() {
		if err := releaseUser(name); err != nil {
			t.Errorf("sshdtest: %v", err)
		}
	})
	if err := prepareUser(name, shell); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
}

// lockUsers takes the lock on the users, in this process and across test
// binaries.
func lockUsers() (unlock func(), err error) {
	usersMu.Lock()
	if err := os.MkdirAll(usersDir, 0o700); err != nil {
		usersMu.Unlock()
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(usersDir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		usersMu.Unlock()
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		usersMu.Unlock()
		return nil, fmt.Errorf("lock %s: %v", lock.Name(), err)
	}
	return func() {
		lock.Close() // and the flock with it
		usersMu.Unlock()
	}, nil
}

func holderFile(name string, pid int) string {
	return filepath.Join(usersDir, fmt.Sprintf("%s.%d", name, pid))
}

func origFile(name string) string { return filepath.Join(usersDir, name+".orig") }

// prepareUser makes name, or keeps what it was before it changes it.
func prepareUser(name, shell string) error {
	if _, err := user.Lookup(name); err != nil {
		var unknown user.UnknownUserError
		if !errors.As(err, &unknown) {
			return fmt.Errorf("look up user %q: %v", name, err)
		}
		if out, err := retryLocked("useradd", "--create-home", "--shell", shell, "--comment", madeComment, name); err != nil {
			return fmt.Errorf("useradd %s: %v\n%s", name, err, out)
		}
	}
	entry, err := passwdEntry(name)
	if err != nil {
		return err
	}
	password, err := shadowPassword(name)
	if err != nil {
		return err
	}
	if entry.comment != madeComment {
		if _, err := os.Stat(origFile(name)); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(origFile(name), []byte(entry.shell+"\n"+password+"\n"), 0o600); err != nil {
				return err
			}
		}
	}
	if entry.shell != shell {
		if out, err := retryLocked("usermod", "-s", shell, name); err != nil {
			return fmt.Errorf("usermod -s %s %s: %v\n%s", shell, name, err, out)
		}
	}
	if strings.HasPrefix(password, "!") {
		if out, err := retryLocked("usermod", "-p", "*", name); err != nil {
			return fmt.Errorf("usermod -p '*' %s: %v\n%s", name, err, out)
		}
	}
	return nil
}

// releaseUser ends one test's hold on name; the last holder of all the
// test binaries removes a user the tests made or restores one they
// changed.
func releaseUser(name string) error {
	unlock, err := lockUsers()
	if err != nil {
		return err
	}
	defer unlock()
	if held[name]--; held[name] > 0 {
		return nil
	}
	delete(held, name)
	os.Remove(holderFile(name, os.Getpid()))
	if othersHold(name) {
		return nil
	}
	entry, err := passwdEntry(name)
	if err != nil {
		return nil // gone already
	}
	if entry.comment == madeComment {
		return removeUser(name)
	}
	orig, err := os.ReadFile(origFile(name))
	if err != nil {
		return nil // nothing was changed
	}
	shell, password, _ := strings.Cut(strings.TrimSuffix(string(orig), "\n"), "\n")
	if out, err := retryLocked("usermod", "-s", shell, "-p", password, name); err != nil {
		return fmt.Errorf("usermod: put back %s's shell and password: %v\n%s", name, err, out)
	}
	return os.Remove(origFile(name))
}

// othersHold reports whether a live process other than this one holds
// name; the files of processes that ended without letting go are removed.
func othersHold(name string) bool {
	files, _ := filepath.Glob(filepath.Join(usersDir, name+".*"))
	others := false
	for _, f := range files {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Ext(f), "."))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			others = true
		} else {
			os.Remove(f)
		}
	}
	return others
}

// removeUser removes name, its home and its mail. Its processes (a
// session's, a StartProcessAs group's) end as their tests clean up:
// userdel refuses while one runs, so it waits a little for them.
func removeUser(name string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := retryLocked("userdel", "--remove", name)
		// exit 12: the home or mail could not be removed (a mail spool
		// never made): the account itself is gone
		if err == nil || exitCode(err) == 12 {
			return nil
		}
		if !bytes.Contains(out, []byte("used by process")) || time.Now().After(deadline) {
			return fmt.Errorf("userdel --remove %s: %v\n%s", name, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

type passwdLine struct{ comment, shell string }

// passwdEntry is name's line of /etc/passwd.
func passwdEntry(name string) (passwdLine, error) {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return passwdLine{}, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) == 7 && f[0] == name {
			return passwdLine{comment: f[4], shell: f[6]}, nil
		}
	}
	return passwdLine{}, fmt.Errorf("user %s is not in /etc/passwd", name)
}

// shadowPassword is name's password field in /etc/shadow ("!" and more:
// locked).
func shadowPassword(name string) (string, error) {
	b, err := os.ReadFile("/etc/shadow")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) > 1 && f[0] == name {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("user %s is not in /etc/shadow", name)
}

// retryLocked runs a shadow-utils command, again while it reports that it
// could not lock the password files (exit 10 for useradd, 8 for usermod).
func retryLocked(name string, args ...string) ([]byte, error) {
	var out []byte
	var err error
	for range 50 {
		out, err = exec.Command(name, args...).CombinedOutput()
		if err == nil || !bytes.Contains(out, []byte("lock")) {
			return out, err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return out, err
}
