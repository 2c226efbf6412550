package textfile

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/testenv"
)

// names is the names of the files in dir.
func names(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n []string
	for _, e := range entries {
		n = append(n, e.Name())
	}
	return n
}

// The file is the text, mode 0644 whatever the umask (node_exporter runs
// as another user), and nothing else is left in the folder.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	m := busyHost("amd")
	for _, now := range []float64{100, 200} { // the second replaces the first
		if err := m.Write(dir, at(now)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, "idlemon-amd.prom"))
		if err != nil {
			t.Fatal(err)
		}
		if want := text(t, m, at(now)); string(got) != want {
			t.Errorf("at %v the file is not WriteTo's text:\n%s", now, got)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, "idlemon-amd.prom"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != 0o644 {
		t.Errorf("mode %v, want -rw-r--r--", fi.Mode())
	}
	if n := names(t, dir); !slices.Equal(n, []string{"idlemon-amd.prom"}) {
		t.Errorf("the folder holds %v", n)
	}
}

func TestWriteToAMissingFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node-exporter")
	err := busyHost("nvidia").Write(dir, at(100))
	var hinted cli.Hinted
	if !errors.As(err, &hinted) || !strings.Contains(err.Error(), dir+" does not exist") ||
		!strings.Contains(hinted.Hint(), "--collector.textfile.directory") {
		t.Fatalf("got %v, want it to name %s, with a hint naming node_exporter's flag", err, dir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Write made the folder: %v", err)
	}
}

// A full file system fails the write, keeps the previous file, and leaves
// no temporary file behind.
func TestWriteToAFullFileSystem(t *testing.T) {
	dir := testenv.MountTmpfs(t, t.TempDir(), "64k")
	m := busyHost("nvidia")
	if err := m.Write(dir, at(100)); err != nil {
		t.Fatal(err)
	}
	before := text(t, m, at(100))
	testenv.FillFileSystem(t, dir)
	err := m.Write(dir, at(200))
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("got %v, want ENOSPC", err)
	}
	if n := names(t, dir); !slices.Equal(n, []string{"filler", "idlemon-nvidia.prom"}) {
		t.Errorf("the folder holds %v", n)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "idlemon-nvidia.prom")); string(got) != before {
		t.Errorf("the previous file was not kept:\n%s", got)
	}
}

// An idlemon killed while writing leaves its temporary file; the next
// one's first write removes it, and nothing that is not its own.
func TestWriteRemovesAKilledIdlemonsTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{".idlemon-nvidia.prom.0123456789abcdef.tmp", ".idlemon-amd.prom.0123456789abcdef.tmp", "other.prom"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := busyHost("nvidia").Write(dir, at(100)); err != nil {
		t.Fatal(err)
	}
	want := []string{".idlemon-amd.prom.0123456789abcdef.tmp", "idlemon-nvidia.prom", "other.prom"}
	if n := names(t, dir); !slices.Equal(n, want) {
		t.Errorf("the folder holds %v, want %v", n, want)
	}
}
