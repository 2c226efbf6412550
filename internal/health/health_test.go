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

// A lost GPU is failed whatever the policy: with lost left out of failed,
// its health would say ok while its state says failed.
func TestAssessLostIsAlwaysFailed(t *testing.T) {
	for _, p := range []Policy{DefaultPolicy(), {}, {Failed: []string{RemapFailure}, Degraded: []string{RemapPending}}} {
		h := Assess(Readings{Lost: "GPU is lost", RemapPending: true}, p)
		if h.State != Failed || len(h.Findings) == 0 || h.Findings[0] != (Finding{Condition: Lost, Severity: Failed, Detail: "GPU is lost"}) {
			t.Errorf("policy %+v: health %+v, want failed with lost first", p, h)
		}
	}
}

// An ECC count is whole: a fraction (a hand-made CSV) is no error, and
// never reads "0 uncorrectable ECC errors".
func TestAssessECCFraction(t *testing.T) {
	for _, v := range []float64{0.5, 1e-7} {
		if h := Assess(Readings{ECCUncorrected: v, ECCUncorrectedValid: true}, DefaultPolicy()); h.State != OK {
			t.Errorf("ecc_uncorrected %v: %+v, want ok", v, h)
		}
	}
}

// The driver's recovery action: failed by default, with what it asks in
// words; "none" and not known are no condition.
func TestAssessRecoveryAction(t *testing.T) {
	for action, want := range map[string]string{
		"":        "",
		"none":    "",
		"reset":   "the driver asks for recovery: reset the GPU (nvidia-smi -r) once its processes end",
		"reboot":  "the driver asks for recovery: reboot the node",
		"unknown": "the driver asks for recovery: unknown",
	} {
		h := Assess(Readings{RecoveryAction: action}, DefaultPolicy())
		switch {
		case want == "" && h.State != OK:
			t.Errorf("%q: %+v, want ok", action, h)
		case want != "" && (h.State != Failed || h.Findings[0] != Finding{Condition: RecoveryAction, Severity: Failed, Detail: want}):
			t.Errorf("%q: %+v, want failed: %s", action, h, want)
		}
	}
}
