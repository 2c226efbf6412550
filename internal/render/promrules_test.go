package render

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumon/gpumon/internal/testenv"
)

// TestPromRules checks the rules in dist/prometheus against the metrics
// Prom writes: promtool must accept both rule files (duplicate rules are
// fatal) and pass their unit tests, dist/prometheus/tests.yml.
func TestPromRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Need(t, "promtool not found (apt-get install prometheus)")
	}
	dir := filepath.Join("..", "..", "dist", "prometheus")
	for _, args := range [][]string{
		{"check", "rules", "--lint=all", "--lint-fatal", "gpumon.rules.yml", "gpumon.alerts.yml"},
		{"test", "rules", "tests.yml"},
	} {
		t.Run(strings.Join(args[:2], " "), func(t *testing.T) {
			cmd := exec.Command(promtool, args...)
			cmd.Dir = dir // tests.yml names the rule files relative to itself
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("promtool %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, out)
			}
		})
	}
}
