package render

import (
	"os"
	"path/filepath"
	"testing"
)

// A temporary file is made beside its target, never in $TMPDIR (which
// renameio picks when it is on the same file system): a render killed
// mid-write leaves its leftover beside the output, not in a shared /tmp.
func TestPendingFileBesideItsTarget(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	out := filepath.Join(t.TempDir(), "index.html")
	f, err := pendingFile(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Cleanup()
	if got := filepath.Dir(f.Name()); got != filepath.Dir(out) {
		t.Errorf("temporary file in %s, want %s (TMPDIR is %s)", got, filepath.Dir(out), tmp)
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("TMPDIR holds %v", entries)
	}
}
