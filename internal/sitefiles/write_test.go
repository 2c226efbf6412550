package sitefiles

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/testenv"
)

// helperEnv, set, makes the test binary write one file and print the
// error and its hint instead of running the tests: the way to try Write as
// another user (root ignores permissions).
const helperEnv = "SITEFILES_HELPER_WRITE"

func TestMain(m *testing.M) {
	if path := os.Getenv(helperEnv); path != "" {
		err := Write(path, writeString("new\n"))
		fmt.Printf("%s\n%s\n", errText(err), hintOf(err))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var errProducer = errors.New("template: no such field")

func TestWrite(t *testing.T) {
	for _, c := range []struct {
		name      string
		before    tree
		file      string // in the test's folder
		write     func(io.Writer) error
		after     tree
		wantErr   string // with DIR for the test's folder
		wantHint  string
		wantCause error
	}{
		{name: "new file", file: "index.html", write: writeString("new"),
			after: tree{"index.html": "new"}},
		{name: "replaces a file", before: tree{"index.html": "old", "about.html": "about"},
			file: "index.html", write: writeString("new"),
			after: tree{"index.html": "new", "about.html": "about"}},
		{name: "a failed write keeps the old file and no temporary file",
			before: tree{"index.html": "old"}, file: "index.html",
			write: func(w io.Writer) error {
				io.WriteString(w, strings.Repeat("half a page ", 10000))
				return errProducer
			},
			after:     tree{"index.html": "old"},
			wantErr:   "cannot write DIR/index.html: template: no such field",
			wantCause: errProducer},
		{name: "the write func's own errors are its own",
			before: tree{"index.html": "old"}, file: "index.html",
			write: func(w io.Writer) error {
				return fmt.Errorf("reading reservations: %w", &fs.PathError{Op: "open", Path: "/etc/gpumon/r.ini", Err: syscall.EACCES})
			},
			after:     tree{"index.html": "old"},
			wantErr:   "cannot write DIR/index.html: reading reservations: open /etc/gpumon/r.ini: permission denied",
			wantCause: syscall.EACCES},
		{name: "not a file name", file: "web/", write: writeString("new"),
			after:     tree{},
			wantErr:   "cannot write DIR/web/: it is not a file name",
			wantCause: fs.ErrInvalid},
		{name: "missing folder", file: "missing/metrics.prom", write: writeString("new"),
			after:     tree{},
			wantErr:   "cannot write DIR/missing/metrics.prom: folder DIR/missing does not exist",
			wantHint:  "create it (sudo install -d -o " + userName() + " DIR/missing) or change the path",
			wantCause: os.ErrNotExist},
		{name: "a link is replaced, not followed",
			before: tree{"web/index.html": "-> ../victim", "victim": "precious"},
			file:   "web/index.html", write: writeString("new"),
			after: tree{"web": "/", "web/index.html": "new", "victim": "precious"}},
		{name: "a folder in the way", before: tree{"status.json/keep": "kept"},
			file: "status.json", write: writeString("new"),
			after:     tree{"status.json": "/", "status.json/keep": "kept"},
			wantErr:   "cannot write DIR/status.json: a folder of that name is in the way",
			wantHint:  "move it away (mv DIR/status.json DIR/status.json.old)",
			wantCause: syscall.EEXIST},
		{name: "the folder is a file", before: tree{"web": "a file"},
			file: "web/index.html", write: writeString("new"),
			after:     tree{"web": "a file"},
			wantErr:   "cannot write DIR/web/index.html: DIR/web is not a folder",
			wantCause: syscall.ENOTDIR},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			build(t, dir, c.before)
			err := Write(dir+"/"+c.file, c.write) // not Join: it would drop a final /
			if diff := cmp.Diff(c.after, snapshot(t, dir)); diff != "" {
				t.Errorf("folder after Write (-want +got):\n%s", diff)
			}
			unDir := func(s string) string { return strings.ReplaceAll(s, dir, "DIR") }
			if got := unDir(errText(err)); got != c.wantErr {
				t.Errorf("error %q, want %q", got, c.wantErr)
			}
			if got := unDir(hintOf(err)); got != c.wantHint {
				t.Errorf("hint %q, want %q", got, c.wantHint)
			}
			if c.wantCause != nil && !errors.Is(err, c.wantCause) {
				t.Errorf("error %v is not %v", err, c.wantCause)
			}
			var e *Error
			if err != nil && !errors.As(err, &e) {
				t.Errorf("error %T is not an *Error", err)
			}
		})
	}
}

// The file is 0644 whatever the umask or the old file's mode: nginx and
// node_exporter run as other users.
func TestWriteMode(t *testing.T) {
	for _, c := range []struct {
		name    string
		umask   int
		oldMode os.FileMode // 0: no old file
	}{
		{"new, umask 077", 0o077, 0},
		{"new, umask 022", 0o022, 0},
		{"over a 0600 file, umask 077", 0o077, 0o600},
		{"over a 0666 file, umask 0", 0, 0o666},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "status.json")
			if c.oldMode != 0 {
				if err := os.WriteFile(path, []byte("old"), c.oldMode); err != nil {
					t.Fatal(err)
				}
				os.Chmod(path, c.oldMode)
			}
			old := syscall.Umask(c.umask)
			err := Write(path, writeString("{}"))
			syscall.Umask(old)
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode() != 0o644 {
				t.Errorf("mode %v, want -rw-r--r--", fi.Mode())
			}
		})
	}
}

// A write that panics removes its temporary file too.
func TestWritePanics(t *testing.T) {
	dir := t.TempDir()
	build(t, dir, tree{"index.html": "old"})
	func() {
		defer func() { recover() }()
		Write(filepath.Join(dir, "index.html"), func(w io.Writer) error {
			io.WriteString(w, "half")
			panic("template bug")
		})
	}()
	if diff := cmp.Diff(tree{"index.html": "old"}, snapshot(t, dir)); diff != "" {
		t.Errorf("folder after a panic (-want +got):\n%s", diff)
	}
}

// A full file system keeps the old file, leaves no temporary file, and
// says so.
func TestWriteFull(t *testing.T) {
	dir := testenv.MountTmpfs(t, t.TempDir(), "64k")
	build(t, dir, tree{"metrics.prom": "old"})
	err := Write(filepath.Join(dir, "metrics.prom"), writeString(strings.Repeat("gpumon_gpu_utilization 1\n", 10000)))
	if diff := cmp.Diff(tree{"metrics.prom": "old"}, snapshot(t, dir)); diff != "" {
		t.Errorf("folder after a write too big for it (-want +got):\n%s", diff)
	}
	want := fmt.Sprintf("cannot write %s/metrics.prom: the file system of %[1]s is full; the previous file was kept", dir)
	if errText(err) != want {
		t.Errorf("error %q, want %q", errText(err), want)
	}
	if want := fmt.Sprintf("free some space on it (df -h %s)", dir); hintOf(err) != want {
		t.Errorf("hint %q, want %q", hintOf(err), want)
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("error %v is not ENOSPC", err)
	}
}

func TestWriteReadOnly(t *testing.T) {
	dir := t.TempDir()
	build(t, dir, tree{"status.json": "old"})
	testenv.MountReadOnly(t, dir)
	err := Write(filepath.Join(dir, "status.json"), writeString("new"))
	if diff := cmp.Diff(tree{"status.json": "old"}, snapshot(t, dir)); diff != "" {
		t.Errorf("folder after Write (-want +got):\n%s", diff)
	}
	want := fmt.Sprintf("cannot write %s/status.json: the file system of %[1]s is read-only; the previous file was kept", dir)
	if errText(err) != want {
		t.Errorf("error %q, want %q", errText(err), want)
	}
	if want := "remount it read-write, or change the path to a writable folder"; hintOf(err) != want {
		t.Errorf("hint %q, want %q", hintOf(err), want)
	}
}

// A folder the user may not write in, like Debian's node_exporter textfile
// folder (root, 0755): the error says who and where, the hint how. Root
// ignores permissions, so the write runs as nobody in a child process.
func TestWritePermissionDenied(t *testing.T) {
	testenv.NeedRoot(t)
	nobody, nogroup := 65534, 65534
	base := worldReadableDir(t)
	exe := copyTestBinary(t, base)
	for _, c := range []struct {
		name, file string
		gid        int // the folder's group
		wantErr    string
		wantHint   string
	}{
		{"textfile folder of root", "gpumon.prom", 0,
			"cannot write DIR/gpumon.prom: user nobody may not create files in DIR (owner root, group root, mode 0755)",
			"let a group nobody is in write there (sudo chgrp nogroup DIR && sudo chmod g+w DIR), " +
				"or give nobody a folder of its own (sudo install -d -o nobody /var/lib/nobody/textfile), " +
				"write the file there and point node_exporter's --collector.textfile.directory at it (1.9 and later take several)"},
		{"web folder of a group the user is in", "index.html", nogroup,
			"cannot write DIR/index.html: user nobody may not create files in DIR (owner root, group nogroup, mode 0755)",
			"let its group nogroup write there (sudo chmod g+w DIR), or change the path to a folder nobody owns"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, err := os.MkdirTemp(base, "out")
			if err != nil {
				t.Fatal(err)
			}
			build(t, dir, tree{c.file: "old"})
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dir, 0, c.gid); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(exe)
			cmd.Env = append(os.Environ(), helperEnv+"="+filepath.Join(dir, c.file))
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(nobody), Gid: uint32(nogroup)}}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			got := strings.ReplaceAll(string(out), dir, "DIR")
			if diff := cmp.Diff(c.wantErr+"\n"+c.wantHint+"\n", got); diff != "" {
				t.Errorf("error and hint (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tree{c.file: "old"}, snapshot(t, dir)); diff != "" {
				t.Errorf("folder after Write (-want +got):\n%s", diff)
			}
		})
	}
}

// worldReadableDir is a new folder that other users may enter.
func worldReadableDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sitefiles-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// copyTestBinary copies this test binary into dir, where other users may
// run it (go test's own folder is root's alone).
func copyTestBinary(t testing.TB, dir string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "sitefiles.test")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return exe
}
