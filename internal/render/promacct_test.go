package render

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/testenv"
)

// metrics.prom's accounting: each user's energy counter (joules, from the
// history's totals) and GPU-seconds per model (a series for each model
// they held, named as the price's), each team member's team (a user in two
// teams once, in the team TeamOf gives), and the prices (of the models of
// the last 30 days and of the counters); the team and price families only
// where [teams] and [accounting] set them. promtool accepts it.
func TestPromAccounting(t *testing.T) {
	s := &history.Summary{
		Totals: history.Totals{UserEnergyJ: map[string]float64{"bob": 3.6e6, "alice": 7.2e6, `e"vil`: 1},
			UserModelGPU: map[string]map[string]float64{
				"bob":   {"T4": 7200, "A100": 3600},
				"alice": {"A100": 36000},
				`e"vil`: {"H100 \"80GB\"": 1}, // a model the last 30 days did not see
			}},
		Models30d: map[string]history.Figures{"A100": {GPUSeconds: 3600}, "T4": {GPUSeconds: 3600}, "V100": {GPUSeconds: 3600}},
	}
	counters := []string{
		`gpumon_user_energy_joules_total{user="alice"} 7200000`,
		`gpumon_user_energy_joules_total{user="bob"} 3600000`,
		`gpumon_user_energy_joules_total{user="e\"vil"} 1`,
		`gpumon_user_model_gpu_seconds_total{user="alice",model="A100"} 36000`,
		`gpumon_user_model_gpu_seconds_total{user="bob",model="A100"} 3600`,
		`gpumon_user_model_gpu_seconds_total{user="bob",model="T4"} 7200`,
		`gpumon_user_model_gpu_seconds_total{user="e\"vil",model="H100 \"80GB\""} 1`,
	}
	for _, tt := range []struct {
		name, ini string
		want      []string // the accounting's samples, in order
	}{
		{"nothing set", "", counters},
		{"teams and prices", "[accounting]\na100 = 2.5\nt4 = 0\nkwh = 0.3\n[teams]\nvision = alice, dave\nnlp = bob, alice\n", append(slices.Clip(counters),
			`gpumon_user_team{user="alice",team="vision"} 1`, // the first team wins (the stub's rule; the accounting's decides)
			`gpumon_user_team{user="dave",team="vision"} 1`,
			`gpumon_user_team{user="bob",team="nlp"} 1`,
			`gpumon_gpu_hour_price{model="A100"} 2.5`, // T4's 0 and V100's none left out
			`gpumon_kwh_price 0.3`,
		)},
		{"a default price, no kWh price", "[accounting]\ndefault = 1.5\n", append(slices.Clip(counters),
			`gpumon_gpu_hour_price{model="A100"} 1.5`,
			`gpumon_gpu_hour_price{model="H100 \"80GB\""} 1.5`, // the same label as the counter's
			`gpumon_gpu_hour_price{model="T4"} 1.5`,
			`gpumon_gpu_hour_price{model="V100"} 1.5`,
		)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rep := testReport(t, readRows(t, "testdata/load_data.csv"), "")
			rep.History = s
			rep.Config.Accounting = testAccounting(t, tt.ini)
			var b bytes.Buffer
			if err := writeProm(&b, rep); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, line := range strings.Split(b.String(), "\n") {
				for _, family := range []string{"gpumon_user_energy_joules_total", "gpumon_user_model_gpu_seconds_total", "gpumon_user_team", "gpumon_gpu_hour_price", "gpumon_kwh_price"} {
					if strings.HasPrefix(line, family+"{") || strings.HasPrefix(line, family+" ") {
						got = append(got, line)
					}
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("samples (-want +got):\n%s", diff)
			}
			checkMetrics(t, b.Bytes())
		})
	}
}

// checkMetrics runs promtool check metrics on a metrics.prom.
func checkMetrics(t *testing.T, metrics []byte) {
	t.Helper()
	testenv.CheckMetrics(t, metrics)
}
