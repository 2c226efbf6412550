package health

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/inifile"
)

func readPolicy(t testing.TB, text string) (Policy, error) {
	t.Helper()
	f, err := inifile.Read(strings.NewReader(text), "/etc/gpumon/config.ini")
	if err != nil {
		t.Fatal(err)
	}
	p := DefaultPolicy()
	err = ReadConfig(f, &p)
	return p, err
}

func TestReadConfig(t *testing.T) {
	def := DefaultPolicy()
	for _, tc := range []struct {
		name, text string
		want       Policy
	}{
		{"no section", "[common]\nhosts = a\n", def},
		{"empty section", "[health]\n", def},
		{"failed moves a condition out of degraded", "[health]\nfailed = lost, remap_failure, xid_fatal, remap_pending\n",
			Policy{Failed: []string{Lost, RemapFailure, XIDFatal, RemapPending},
				Degraded:  []string{RetiredPagesPending, ECCUncorrected, XIDWarning, HWPowerBrake, HWThermal, HWSlowdown, SWThermal},
				FatalXIDs: def.FatalXIDs, WarningXIDs: def.WarningXIDs}},
		{"degraded alone moves out of failed", "[health]\ndegraded = XID_Fatal,\n  sw_thermal\n",
			Policy{Failed: []string{Lost, RecoveryAction, RemapFailure}, Degraded: []string{XIDFatal, SWThermal},
				FatalXIDs: def.FatalXIDs, WarningXIDs: def.WarningXIDs}},
		{"empty lists ignore everything", "[health]\nfailed =\ndegraded =\n",
			Policy{Failed: []string{}, Degraded: []string{}, FatalXIDs: def.FatalXIDs, WarningXIDs: def.WarningXIDs}},
		{"xids sorted and once", "[health]\nfatal_xids = 79, 48, 79\nwarning_xids = 94\n",
			Policy{Failed: def.Failed, Degraded: def.Degraded, FatalXIDs: []int{48, 79}, WarningXIDs: []int{94}}},
		{"a warning xid leaves the fatal list", "[health]\nwarning_xids = 63, 74\n",
			Policy{Failed: def.Failed, Degraded: def.Degraded, FatalXIDs: []int{48, 61, 62, 64, 79, 95, 119, 120, 140},
				WarningXIDs: []int{63, 74}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readPolicy(t, tc.text)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, text, want, hint string
	}{
		{"unknown condition", "[health]\nfailed = lost, ecc_uncorected\n",
			`/etc/gpumon/config.ini:2: failed: "ecc_uncorected" is not a condition`,
			"known conditions: lost, recovery_action, remap_failure, xid_fatal, remap_pending, retired_pages_pending, ecc_uncorrected, xid_warning, hw_power_brake, hw_thermal, hw_slowdown, sw_thermal"},
		{"in both lists", "[health]\nfailed = remap_pending\n\ndegraded = hw_slowdown, remap_pending\n",
			`/etc/gpumon/config.ini:4: degraded: remap_pending is in failed too: a GPU cannot be both`, ""},
		{"lost degraded", "[health]\ndegraded = lost, remap_pending\n",
			`/etc/gpumon/config.ini:2: degraded: lost cannot be degraded: a GPU nvidia-smi cannot read is offered to nobody`,
			"leave lost out of degraded (it is always failed)"},
		{"xid in both lists", "[health]\nfatal_xids = 48\nwarning_xids = 48\n",
			`/etc/gpumon/config.ini:3: warning_xids: 48 is in fatal_xids too: a GPU cannot be both`, ""},
		{"xid not a number", "[health]\nfatal_xids = 48, xid79\n",
			`/etc/gpumon/config.ini:2: fatal_xids: "xid79" is not an XID (a whole number from 1 to 9999)`,
			"write XID codes as NVIDIA's XID catalogue numbers them, comma-separated: 48, 79"},
		{"xid zero", "[health]\nwarning_xids = 0\n",
			`/etc/gpumon/config.ini:2: warning_xids: "0" is not an XID (a whole number from 1 to 9999)`,
			"write XID codes as NVIDIA's XID catalogue numbers them, comma-separated: 48, 79"},
		{"xid too big", "[health]\nwarning_xids = 18446744073709551616\n",
			`/etc/gpumon/config.ini:2: warning_xids: "18446744073709551616" is not an XID (a whole number from 1 to 9999)`,
			"write XID codes as NVIDIA's XID catalogue numbers them, comma-separated: 48, 79"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readPolicy(t, tc.text)
			var e *inifile.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v, want an *inifile.Error", err)
			}
			if err.Error() != tc.want || e.Hint() != tc.hint {
				t.Errorf("error:\n%s\nhint: %s\nwant:\n%s\nhint: %s", err, e.Hint(), tc.want, tc.hint)
			}
		})
	}
}

// config.example.ini's [health] shows the defaults: its keys, uncommented,
// read as DefaultPolicy.
func TestExampleShowsTheDefaults(t *testing.T) {
	src, err := os.ReadFile("../../config.example.ini")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(src), "\n[health]\n")
	if !ok {
		t.Fatal("config.example.ini has no [health] section")
	}
	section, _, _ = strings.Cut(section, "\n\n# Display names")
	key := regexp.MustCompile(`^# ([a-z_]+ = .*|    [a-z_]+(, [a-z_]+)*,?)$`) // a key, or its continuation line
	text := "[health]\n"
	keys := 0
	for _, line := range strings.Split(section, "\n") {
		if m := key.FindStringSubmatch(line); m != nil {
			text += m[1] + "\n"
			if !strings.HasPrefix(m[1], " ") {
				keys++
			}
		}
	}
	if keys != len(ConfigKeys) {
		t.Errorf("the example shows %d keys, want %d:\n%s", keys, len(ConfigKeys), text)
	}
	got, err := readPolicy(t, text)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(DefaultPolicy(), got); diff != "" {
		t.Errorf("the example's [health] (-defaults +example):\n%s", diff)
	}
}
