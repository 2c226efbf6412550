package packaging

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/testenv"
)

// machine is a copy of this machine's /etc, with an empty /var and /home,
// that gpumon's maintainer scripts run on (as root, in a mount namespace of
// their own where the copies hide the real folders): the users they make
// and the files they write stay in root, which the test removes.
type machine struct {
	root string
}

// onlyVanished reports whether every complaint of cp is of a file gone
// between its listing and its copy: /etc/passwd.lock and the like, which
// another package's tests (useradd for the sshd tests) make and remove
// while this one copies /etc. A file gone is rightly not in the copy.
func onlyVanished(cpOut []byte) bool {
	lines := strings.Split(strings.TrimSpace(string(cpOut)), "\n")
	for _, l := range lines {
		if !strings.HasPrefix(l, "cp: cannot stat ") || !strings.HasSuffix(l, ": No such file or directory") {
			return false
		}
	}
	return len(lines) > 0
}

func newMachine(t *testing.T) machine {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Need(t, "the postinst test needs root (useradd, chown, mount namespaces)")
	}
	for _, prog := range []string{"unshare", "useradd", "dpkg-statoverride"} {
		if _, err := exec.LookPath(prog); err != nil {
			testenv.Need(t, "the postinst test needs "+prog)
		}
	}
	m := machine{root: t.TempDir()}
	if out, err := exec.Command("cp", "-a", "/etc", m.root+"/").CombinedOutput(); err != nil && !onlyVanished(out) {
		t.Fatalf("copy /etc: %v\n%s", err, out)
	}
	// This machine's tests (sshdtest) may have made a gpumon user: the copy
	// starts without one, as a new machine does.
	for _, db := range []string{"passwd", "shadow", "group", "gshadow", "subuid", "subgid"} {
		m.dropEntry(t, "etc/"+db, "gpumon")
		// a lock another test's useradd held while cp ran is not the copy's
		os.Remove(filepath.Join(m.root, "etc", db+".lock"))
	}
	for _, dir := range []string{"home", "var/lib/dpkg", "var/log", "var/mail", "var/www", "run-systemd"} {
		if err := os.MkdirAll(filepath.Join(m.root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m.write(t, "var/lib/dpkg/statoverride", "", 0o644)
	// The conffile as dpkg unpacks it.
	m.write(t, "etc/gpumon/config.ini", "[common]\n", 0o644)
	return m
}

// dropEntry removes name's line from an /etc/passwd-like file of the copy.
func (m machine) dropEntry(t *testing.T, path, name string) {
	t.Helper()
	file := filepath.Join(m.root, path)
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasPrefix(line, name+":") {
			kept = append(kept, line)
		}
	}
	if err := os.WriteFile(file, []byte(strings.Join(kept, "")), 0); err != nil {
		t.Fatal(err)
	}
}

func (m machine) write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	file := filepath.Join(m.root, path)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, mode); err != nil {
		t.Fatal(err)
	}
}

// run runs script with sh -e on the machine and returns its stderr.
func (m machine) run(t *testing.T, script string) string {
	t.Helper()
	mounts := "mount --bind " + m.root + "/etc /etc\n" +
		"mount --bind " + m.root + "/var /var\n" +
		"mount --bind " + m.root + "/home /home\n" +
		// no systemctl on the real machine's systemd
		"if [ -d /run/systemd ]; then mount --bind " + m.root + "/run-systemd /run/systemd; fi\n"
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-ec", mounts+script)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if out, err := cmd.Output(); err != nil {
		t.Fatalf("on the test machine: %v\nscript:\n%s\nstdout:\n%s\nstderr:\n%s", err, script, out, stderr.String())
	}
	return stderr.String()
}

// postinst runs dist/deb/gpumon.postinst as dpkg does after unpacking.
func (m machine) postinst(t *testing.T) string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join(root, "dist/deb/gpumon.postinst"))
	if err != nil {
		t.Fatal(err)
	}
	return m.run(t, "sh "+script+" configure ''\n")
}

// account is the machine's /etc/passwd entry for name, nil without one.
func (m machine) account(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.root, "etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Split(line, ":"); len(f) == 7 && f[0] == name {
			return f
		}
	}
	return nil
}

// files describes each path as "MODE OWNER" ("0700 gpumon", owners by the
// machine's uids), "missing" when there is none.
func (m machine) files(t *testing.T, paths ...string) map[string]string {
	t.Helper()
	names := map[uint32]string{0: "root"}
	if a := m.account(t, "gpumon"); a != nil {
		uid, _ := strconv.Atoi(a[2])
		names[uint32(uid)] = "gpumon"
	}
	got := map[string]string{}
	for _, p := range paths {
		fi, err := os.Stat(filepath.Join(m.root, p))
		if err != nil {
			got[p] = "missing"
			continue
		}
		uid := fi.Sys().(*syscall.Stat_t).Uid
		owner, ok := names[uid]
		if !ok {
			owner = strconv.Itoa(int(uid))
		}
		got[p] = strconv.FormatUint(uint64(fi.Mode().Perm()), 8) + " " + owner
	}
	return got
}

var serviceNeeds = []string{"var/lib/gpumon", "var/lib/gpumon/.ssh", "var/www/gpumon", "etc/gpumon/config.ini"}

func wantService() map[string]string {
	return map[string]string{
		"var/lib/gpumon":        "755 gpumon",
		"var/lib/gpumon/.ssh":   "700 gpumon",
		"var/www/gpumon":        "755 gpumon",
		"etc/gpumon/config.ini": "600 gpumon",
	}
}

// On a machine without a gpumon user the postinst makes the system user,
// its folders and the config's owner, silently; run again (an upgrade) it
// changes nothing and says nothing.
func TestPostinstFreshMachine(t *testing.T) {
	m := newMachine(t)
	for run := 1; run <= 2; run++ {
		if stderr := m.postinst(t); stderr != "" {
			t.Errorf("run %d: stderr %q, want none", run, stderr)
		}
		a := m.account(t, "gpumon")
		if a == nil {
			t.Fatalf("run %d: no gpumon user", run)
		}
		uid, _ := strconv.Atoi(a[2])
		if got := []string{a[5], a[6]}; !cmp.Equal(got, []string{"/var/lib/gpumon", "/usr/sbin/nologin"}) || uid >= 1000 {
			t.Errorf("run %d: gpumon is uid %d, home and shell %q; want a system user, /var/lib/gpumon, nologin", run, uid, got)
		}
		if diff := cmp.Diff(wantService(), m.files(t, serviceNeeds...)); diff != "" {
			t.Errorf("run %d: the service's files (-want +got):\n%s", run, diff)
		}
	}
	overrides, err := os.ReadFile(filepath.Join(m.root, "var/lib/dpkg/statoverride"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(overrides)), "gpumon gpumon 600 /etc/gpumon/config.ini"; got != want {
		t.Errorf("statoverride %q, want %q (so that upgrades keep the config gpumon's)", got, want)
	}

	// A purge takes the override with the config; the user and its data stay.
	postrm, _ := filepath.Abs(filepath.Join(root, "dist/deb/gpumon.postrm"))
	m.run(t, "sh "+postrm+" purge\n")
	overrides, _ = os.ReadFile(filepath.Join(m.root, "var/lib/dpkg/statoverride"))
	if strings.TrimSpace(string(overrides)) != "" {
		t.Errorf("after purge, statoverride still holds %q", overrides)
	}
	if m.account(t, "gpumon") == nil || m.files(t, "var/lib/gpumon")["var/lib/gpumon"] == "missing" {
		t.Error("purge removed the gpumon user or its home: they are the admin's data")
	}
}

// A gpumon user made before the package (as the sshd tests make it: a home
// under /home, a login shell) still gets every folder the service needs,
// and a warning with the fix for its home; its own files are not touched.
func TestPostinstExistingUser(t *testing.T) {
	m := newMachine(t)
	m.run(t, "useradd --create-home --shell /bin/sh gpumon\n"+
		"install -d -m 0751 -o gpumon -g gpumon /home/gpumon/.ssh\n"+
		"install -m 0640 -o gpumon -g gpumon /dev/null /home/gpumon/.ssh/authorized_keys\n"+
		"chmod 0711 /home/gpumon\n")
	theirs := []string{"home/gpumon", "home/gpumon/.ssh", "home/gpumon/.ssh/authorized_keys"}
	before := m.files(t, theirs...)
	account := m.account(t, "gpumon")

	stderr := m.postinst(t)
	if !strings.Contains(stderr, "home is /home/gpumon") || !strings.Contains(stderr, "usermod -d /var/lib/gpumon gpumon") {
		t.Errorf("stderr %q: want a warning naming the home and the usermod that fixes it", stderr)
	}
	if diff := cmp.Diff(wantService(), m.files(t, serviceNeeds...)); diff != "" {
		t.Errorf("the service's files (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, m.files(t, theirs...)); diff != "" {
		t.Errorf("the user's own files changed (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(account, m.account(t, "gpumon")); diff != "" {
		t.Errorf("the user's passwd entry changed (-before +after):\n%s", diff)
	}
}

// Folders that exist with another owner, and an override the admin set,
// are left as they are: a warning names the chown, nothing is chowned.
func TestPostinstLeavesOthersFiles(t *testing.T) {
	m := newMachine(t)
	m.write(t, "var/www/gpumon/index.html", "theirs\n", 0o644)
	m.run(t, "groupadd --system gpumon\n"+
		"dpkg-statoverride --update --add root gpumon 0640 /etc/gpumon/config.ini\n")

	stderr := m.postinst(t)
	if !strings.Contains(stderr, "/var/www/gpumon belongs to root") || !strings.Contains(stderr, "sudo chown gpumon: /var/www/gpumon") {
		t.Errorf("stderr %q: want a warning that /var/www/gpumon is root's, with the chown", stderr)
	}
	want := wantService()
	want["var/www/gpumon"] = "755 root"
	want["var/www/gpumon/index.html"] = "644 root"
	want["etc/gpumon/config.ini"] = "640 root"
	if diff := cmp.Diff(want, m.files(t, append(serviceNeeds, "var/www/gpumon/index.html")...)); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}
