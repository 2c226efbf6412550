package health

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAssessClockEvents(t *testing.T) {
	for _, tc := range []struct {
		events string
		want   []string
	}{
		{"", nil},
		{"none", nil},
		{"gpu_idle sw_power_cap", nil},
		{"hw_slowdown", []string{HWSlowdown}},
		{"  sw_thermal  hw_power_brake ", []string{HWPowerBrake, SWThermal}},
		{"hw_slowdown_x xhw_thermal", nil},
		{"[N/A]", nil},
	} {
		t.Run(tc.events, func(t *testing.T) {
			var got []string
			for _, f := range Assess(Readings{ClockEvents: tc.events}, DefaultPolicy()).Findings {
				got = append(got, f.Condition)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func BenchmarkAssessHealthy(b *testing.B) {
	r, p := Readings{ClockEvents: "gpu_idle", ECCUncorrectedValid: true}, DefaultPolicy()
	for b.Loop() {
		Assess(r, p)
	}
}
