package publish

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/testenv"
)

// The files history refuses to open get a hint that keeps the history:
// never "move it aside", which would start a new one.
func TestHistoryFixRefusedFile(t *testing.T) {
	for _, tt := range []struct {
		name string
		make func(t *testing.T, db string)
		want string
	}{
		{"a link", func(t *testing.T, db string) {
			writeFile(t, db+".real", 0o600)
			if err := os.Symlink(db+".real", db); err != nil {
				t.Fatal(err)
			}
		}, "remove the link"},
		{"a dangling link", func(t *testing.T, db string) {
			if err := os.Symlink(db+".nowhere", db); err != nil {
				t.Fatal(err)
			}
		}, "remove the link"},
		{"a link in place of its -wal file", func(t *testing.T, db string) {
			writeFile(t, db, 0o600)
			if err := os.Symlink("/etc/passwd", db+"-wal"); err != nil {
				t.Fatal(err)
			}
		}, "remove the link"},
		{"a folder", func(t *testing.T, db string) {
			if err := os.Mkdir(db, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "must name a regular file"},
		{"another account's", func(t *testing.T, db string) {
			testenv.NeedRoot(t)
			writeFile(t, db, 0o600)
			if err := os.Chown(db, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, "run render as the account that owns it"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "history.db")
			tt.make(t, db)
			_, err := history.Config{DB: db}.Open()
			if err == nil {
				t.Fatal("history opened the file; want it refused")
			}
			hint := historyFix(db, err)
			if !strings.Contains(hint, tt.want) || strings.Contains(hint, "move it aside") {
				t.Errorf("open: %v\nhint %q; want one with %q, without moving it aside", err, hint, tt.want)
			}
		})
	}
}

func writeFile(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, nil, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // whatever the umask
		t.Fatal(err)
	}
}
