package fetch

import (
	"bytes"
	"context"
	"github.com/gpumon/gpumon/internal/cli"
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

// Whoever holds load_data.csv's lock, the one refused is told its own fix.
func TestLockedErrorNamesTheFix(t *testing.T) {
	for _, tt := range []struct {
		name, holder, kind, want, hint string
	}{
		{"cron meets cron", "41", "", "another fetch is writing out.csv (pid 41)", "run cron less often"},
		{"cron meets live", "42 live", "", "fetch -every (live mode, pid 42) is writing out.csv", "remove this cron line"},
		{"live meets cron", "43", "live", "a fetch run from cron (pid 43) is writing out.csv", "remove fetch's cron line"},
		{"live meets live", "44 live", "live", "another fetch -every (pid 44) is writing out.csv", "stop it first"},
		{"an empty lock", "", "", "another fetch is writing out.csv (pid ?)", "run cron less often"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := lockedError("out.csv", strings.Fields(tt.holder), tt.kind)
			if err.Error() != tt.want || !strings.Contains(cli.Hint(err), tt.hint) {
				t.Errorf("%q (hint %q), want %q (hint with %q)", err, cli.Hint(err), tt.want, tt.hint)
			}
		})
	}
}
