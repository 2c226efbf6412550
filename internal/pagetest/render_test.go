package pagetest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/render"
)

// renderPage writes rows as load_data.csv, runs the render command on it as
// cron would (no config file: the defaults) and returns the folder that
// holds index.html, status.json and metrics.prom.
func renderPage(t *testing.T, rows []loaddata.Row) string {
	t.Helper()
	return renderPageWith(t, rows, "")
}

// renderPageWith is renderPage with a reservations file (JSON) when resv
// is not "".
func renderPageWith(t *testing.T, rows []loaddata.Row, resv string) string {
	t.Helper()
	dir := t.TempDir()
	csv := filepath.Join(dir, "load_data.csv")
	if err := loaddata.WriteFile(csv, rows); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "www")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	// always a config: the history database goes beside it, in dir, not
	// in the package's folder
	conf := filepath.Join(dir, "config.ini")
	args := []string{"-i", csv, "-o", filepath.Join(out, "index.html"), "-c", conf}
	ini := "[render]\n"
	if resv != "" {
		if err := os.WriteFile(filepath.Join(dir, "reservations.json"), []byte(resv), 0o644); err != nil {
			t.Fatal(err)
		}
		ini += "reservations = " + filepath.Join(dir, "reservations.json") + "\n"
	}
	if err := os.WriteFile(conf, []byte(ini), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := render.Main(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("render %q: %v\nstdout:\n%s\nstderr:\n%s", args, err, &stdout, &stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "index.html")); err != nil {
		t.Fatalf("render wrote no page: %v\nstderr:\n%s", err, &stderr)
	}
	return out
}
