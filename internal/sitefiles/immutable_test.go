package sitefiles

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/testenv"
)

// An immutable file (chattr +i) is named as such, with the attribute to
// lift, not as a permission that chmod would fix.
func TestWriteImmutable(t *testing.T) {
	testenv.NeedRoot(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "index.html")
	os.WriteFile(path, []byte("old"), 0o644)
	if out, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
		testenv.Need(t, "chattr +i: "+strings.TrimSpace(string(out))+" (the file system has no such attribute)")
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", dir).Run() })
	err := Write(path, func(w io.Writer) error { _, err := w.Write([]byte("new")); return err })
	if err == nil || !strings.Contains(err.Error(), "is immutable or append-only") || !strings.Contains(cli.Hint(err), "chattr -i -a "+dir) {
		t.Errorf("error %v (hint %q), want the immutable folder named", err, cli.Hint(err))
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("the file was changed: %q", b)
	}
}
