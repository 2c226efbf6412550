package textfile

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gpumon/gpumon/internal/testenv"
)

// The alerts in dist/prometheus/idlemon.alerts.yml: promtool accepts them
// and passes their unit tests, idlemon.tests.yml.
func TestPromRules(t *testing.T) {
	promtool := testenv.Promtool(t)
	dir := filepath.Join("..", "..", "..", "dist", "prometheus")
	for _, args := range [][]string{
		{"check", "rules", "--lint=all", "--lint-fatal", "idlemon.alerts.yml"},
		{"test", "rules", "idlemon.tests.yml"},
	} {
		t.Run(strings.Join(args[:2], " "), func(t *testing.T) {
			cmd := exec.Command(promtool, args...)
			cmd.Dir = dir // idlemon.tests.yml names the rule file relative to itself
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("promtool %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, out)
			}
		})
	}
}

// Every idlemon series the alerts and their tests name is one WriteTo
// writes, with the bucket bound it writes (a rename here would leave an
// alert that never fires, and tests that pass on made-up series).
func TestPromRulesNameWrittenSeries(t *testing.T) {
	written := samples(t, text(t, busyHost("nvidia"), at(100)))
	var names, les []string
	for k := range written {
		name, labels, _ := strings.Cut(k, "{")
		names = append(names, name)
		if _, le, ok := strings.Cut(labels, `le="`); ok {
			les = append(les, `le="`+le)
		}
	}
	name := regexp.MustCompile(`\bidlemon_[a-z0-9_]+`)
	le := regexp.MustCompile(`le="[^"]*"`)
	for _, file := range []string{"idlemon.alerts.yml", "idlemon.tests.yml"} {
		src, err := os.ReadFile(filepath.Join("..", "..", "..", "dist", "prometheus", file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range name.FindAllString(string(src), -1) {
			if !slices.Contains(names, m) {
				t.Errorf("%s names %s, which the textfile does not have", file, m)
			}
		}
		for _, m := range le.FindAllString(string(src), -1) {
			if !slices.Contains(les, m+"}") {
				t.Errorf("%s names bucket %s, which the textfile does not write", file, m)
			}
		}
	}
}
