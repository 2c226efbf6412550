package render

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

// TestPromRules checks the rules in dist/prometheus against the metrics
// Prom writes: promtool must accept both rule files (duplicate rules are
// fatal) and pass their unit tests, dist/prometheus/tests.yml.
func TestPromRules(t *testing.T) {
	promtool := testenv.Promtool(t)
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

// TestAlertmanagerExample checks dist/prometheus/alertmanager.example.yml
// with amtool: it loads, and GPUIdleHeld reaches the holder (its user
// label) and the admins, root's only the admins, the rest the admins.
func TestAlertmanagerExample(t *testing.T) {
	amtool, err := exec.LookPath("amtool")
	if err != nil {
		testenv.Need(t, "amtool not found (apt-get install prometheus-alertmanager)")
	}
	file := filepath.Join("..", "..", "dist", "prometheus", "alertmanager.example.yml")
	if out, err := exec.Command(amtool, "check-config", file).CombinedOutput(); err != nil {
		t.Fatalf("amtool check-config: %v\n%s", err, out)
	}
	for labels, want := range map[string]string{
		"alertname=GPUIdleHeld user=alice host=gpu01 gpu=0": "gpu-holder,gpu-admins",
		"alertname=GPUIdleHeld user=root host=gpu01 gpu=0":  "gpu-admins",
		"alertname=GPUHostDown host=gpu01":                  "gpu-admins",
	} {
		args := append([]string{"config", "routes", "test", "--config.file=" + file}, strings.Fields(labels)...)
		out, err := exec.Command(amtool, args...).Output()
		if got := strings.TrimSpace(string(out)); err != nil || got != want {
			t.Errorf("route of %s: %q (%v), want %q", labels, got, err, want)
		}
	}
}

// Every gpumon metric the rules in dist/prometheus name is one render
// writes (a rename in prom.go would leave an alert that never fires), with
// the health fixture, a history, teams and prices, as prom_detail = gpu
// writes them.
func TestPromRulesNameWrittenMetrics(t *testing.T) {
	rep := testReport(t, readRows(t, "testdata/health.csv"), "")
	rep.History = markupSummary("alice")
	rep.Config.Accounting = testAccounting(t, "[accounting]\nkwh = 0.25\ndefault = 1\n[teams]\nvision = alice\n")
	var b strings.Builder
	if err := writeProm(&b, rep); err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`\bgpumon_[a-z0-9_]+`)
	for _, file := range []string{"gpumon.rules.yml", "gpumon.alerts.yml"} {
		src, err := os.ReadFile(filepath.Join("..", "..", "dist", "prometheus", file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range slices.Compact(slices.Sorted(slices.Values(name.FindAllString(string(src), -1)))) {
			if !strings.Contains(b.String(), "# TYPE "+m+" ") {
				t.Errorf("%s names %s, which metrics.prom does not have", file, m)
			}
		}
	}
}
