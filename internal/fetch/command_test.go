package fetch

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A slow run meeting the next cron tick: the second run leaves the file to
// the first and says so; the previous CSV is untouched.
func TestOverlappingRunsDoNotClobber(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "load_data.csv")
	os.WriteFile(out, []byte("previous"), 0o644)
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[common]\nhosts = local\n"), 0o644)

	unlock, err := lockFile(out + ".lock") // the first run, still polling
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	err = Main(context.Background(), []string{"-c", ini, "-o", out}, &stderr, &stderr)
	if err == nil || !strings.Contains(err.Error(), "another fetch is writing "+out+" (pid ") {
		t.Fatalf("second run: %v", err)
	}
	if got, _ := os.ReadFile(out); string(got) != "previous" {
		t.Errorf("the file changed: %q", got)
	}
	unlock()
	if unlock, err = lockFile(out + ".lock"); err != nil {
		t.Fatalf("the lock was not released: %v", err)
	}
	unlock()
}

// A link in the lock file's place (planted in a web folder others can
// write) is refused: fetch used to follow it and truncate its target.
func TestLockFileLinkRefused(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("IMPORTANT DATA"), 0o644)
	out := filepath.Join(dir, "load_data.csv")
	if err := os.Symlink(victim, out+".lock"); err != nil {
		t.Fatal(err)
	}
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[common]\nhosts = local\n"), 0o644)
	var stderr bytes.Buffer
	err := Main(context.Background(), []string{"-c", ini, "-o", out}, &stderr, &stderr)
	if err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Errorf("run with a linked lock file: %v, want an error saying it is a link", err)
	}
	if got, _ := os.ReadFile(victim); string(got) != "IMPORTANT DATA" {
		t.Errorf("the link's target changed: %q", got)
	}
}
