package config

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/idlestate"
	"github.com/gpumon/gpumon/internal/inifile"
)

// The older tool's own example file runs as is.
func TestOldToolConfig(t *testing.T) {
	c, err := Load("testdata/gpu_mon.conf")
	if err != nil {
		t.Fatal(err)
	}
	if c.Interval != 10*time.Second || c.MinIdle != defaultMinIdle || c.Grace != defaultGrace ||
		c.Devices != defaultDevices || c.StateFile != idlestate.DefaultPath || c.User != "" {
		t.Errorf("defaults: %+v", c)
	}
	if len(c.GPUs) != 1 || !c.GPUs[0].All || strings.Join(c.GPUs[0].Ignore, ",") != "nvidia-smi" {
		t.Errorf("gpu sections: %+v", c.GPUs)
	}
	if len(c.Jobs) != 1 || c.Jobs[0].Name != "process-all" || c.Jobs[0].Dir != "/tmp" || c.Jobs[0].Cmd != "miner-run" ||
		!c.Jobs[0].All || c.Jobs[0].Log != "/dev/null" {
		t.Errorf("jobs: %+v", c.Jobs)
	}
	if !c.TTY.Enabled || strings.Join(c.TTY.Whitelist, ",") != "user1,user2" || c.TTY.Idle != 300*time.Second {
		t.Errorf("tty: %+v", c.TTY)
	}
	if got := strings.Join(c.IgnoreFor(3), ","); got != "nvidia-smi,nvidia-persistenced,nv-hostengine,dcgm-exporter,Xorg,Xwayland" {
		t.Errorf("IgnoreFor(3) = %s", got)
	}
}

func TestNewKeys(t *testing.T) {
	src := `[defaults]
interval_seconds = 0.5
min_idle_seconds = 0
grace_seconds = 2.5
devices = dev/nvidia*
user = miner
state_file = state.json
[gpu-a]
gpus = 0, 1
ignore_programs = Xorg, gnome-shell
[process-one]
cmd = ./run.sh --fast
gpus = 1,0
[process-two]
cmd = other
gpus = 3
`
	c, err := Parse(strings.NewReader(src), "/etc/x/idlemon.ini")
	if err != nil {
		t.Fatal(err)
	}
	if c.Interval != 500*time.Millisecond || c.MinIdle != 0 || c.Grace != 2500*time.Millisecond ||
		c.Devices != "/etc/x/dev/nvidia*" || c.User != "miner" || c.StateFile != "/etc/x/state.json" {
		t.Errorf("%+v", c)
	}
	if j := c.Jobs[0]; j.Dir != "/" || j.All || len(j.GPUs) != 2 || j.GPUs[0] != 0 {
		t.Errorf("job: %+v", j)
	}
	if got := strings.Join(c.IgnoreFor(1), ","); got != "nvidia-smi,nvidia-persistenced,nv-hostengine,dcgm-exporter,Xorg,Xwayland,gnome-shell" {
		t.Errorf("IgnoreFor(1) = %s", got)
	}
	// [gpu-a] covers 0 and 1 only: GPU 3 gets the defaults alone
	if got := strings.Join(c.IgnoreFor(3), ","); got != "nvidia-smi,nvidia-persistenced,nv-hostengine,dcgm-exporter,Xorg,Xwayland" {
		t.Errorf("IgnoreFor(3) = %s", got)
	}
}

// An AMD host's keys: the vendor (any case), /dev/kfd and the KFD folder,
// relative to the file's folder like every path; without them, auto and
// the kernel's paths, and devices marked as not set (each vendor has its
// own default).
func TestVendorKeys(t *testing.T) {
	c, err := Parse(strings.NewReader("[defaults]\nvendor = AMD\nkfd_device = dev/kfd\nkfd_sysfs = sys/kfd\n"), "/etc/x/idlemon.ini")
	if err != nil {
		t.Fatal(err)
	}
	if c.Vendor != VendorAMD || c.KFDDevice != "/etc/x/dev/kfd" || c.KFDSysfs != "/etc/x/sys/kfd" || c.DevicesSet {
		t.Errorf("%+v", c)
	}
	c, err = Parse(strings.NewReader("[defaults]\ndevices = /dev/nvidia[0-9]*\n"), "f.ini")
	if err != nil {
		t.Fatal(err)
	}
	if c.Vendor != VendorAuto || c.KFDDevice != "/dev/kfd" || c.KFDSysfs != "/sys/class/kfd/kfd" || !c.DevicesSet {
		t.Errorf("%+v", c)
	}
}

// Every mistake names the file, the line and the key.
func TestErrors(t *testing.T) {
	for _, tc := range []struct{ src, want, hint string }{
		{"[defaults]\ninterval_secs = 10\n", "f.ini:2: interval_secs: unknown key in [defaults]", "known keys: interval_seconds"},
		{"[defaults]\ninterval_seconds = ten\n", `f.ini:2: interval_seconds: "ten" is not a number of seconds above 0`, ""},
		{"[defaults]\ninterval_seconds = 0\n", `f.ini:2: interval_seconds: "0" is not a number of seconds above 0`, ""},
		{"[defaults]\ngrace_seconds = -1\n", `f.ini:2: grace_seconds: "-1" is not a number of seconds (0 or more)`, ""},
		{"[defaults]\ndevices = /dev/[\n", `f.ini:2: devices: "/dev/[" is not a valid glob`, ""},
		{"x = 1\n[defaults]\n", "f.ini:1: x: a key before the first section", "[defaults]"},
		{"[defaults]\n\n[gpus]\ngpus=ALL\n[mystery]\n", "f.ini:5: unknown section [mystery]", "[gpu-NAME]"},
		{"[gpu-a]\ngpus = 0,x\n", `f.ini:2: gpus: "0,x" is not ALL or a list of GPU indices like 0,1,3`, ""},
		{"[gpu-a]\nignore_programs = a\n", "f.ini:1: gpus: missing in [gpu-a]", "gpus = ALL"},
		{"[process-a]\ngpus = 0\n", "f.ini:1: cmd: missing in [process-a]", ""},
		{"[process-a]\ncmd = x\ngpus = 0,1\n[process-b]\ncmd = y\ngpus = 1\n", "f.ini:6: gpus: gpu 1 is already in [process-a]", ""},
		{"[process-a]\ncmd = x\ngpus = ALL\n[process-b]\ncmd = y\ngpus = all\n", "f.ini:6: gpus: ALL is already the GPUs of [process-a]", ""},
		{"[process-a]\ncmd = x\ngpus = 0\nuser = bob\n", "f.ini:4: user: unknown key in [process-a]", "dir, cmd, gpus, log"},
		{"[tty]\nenabled = maybe\n", `f.ini:2: enabled: "maybe" is not a boolean`, ""},
		{"[tty]\nidle_seconds = 5m\n", `f.ini:2: idle_seconds: "5m" is not a number of seconds`, ""},
		{"[defaults]\nvendor = intel\n", `f.ini:2: vendor: "intel" is not auto, nvidia or amd`, "/dev/kfd"},
		{"[defaults]\nkfd_sysfs =\n", `f.ini:2: kfd_sysfs: empty`, ""},
	} {
		_, err := Parse(strings.NewReader(tc.src), "f.ini")
		if err == nil {
			t.Errorf("%q: no error", tc.src)
			continue
		}
		if !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q:\n got %s\nwant %s", tc.src, err, tc.want)
		}
		if e, ok := err.(*inifile.Error); !ok || !strings.Contains(e.Hint(), tc.hint) {
			t.Errorf("%q: %v: want an *inifile.Error whose hint has %q", tc.src, err, tc.hint)
		}
	}
}

// The shipped example parses, and says what the docs say.
func TestExampleConfig(t *testing.T) {
	c, err := Load("../../../idlemon.example.ini")
	if err != nil {
		t.Fatal(err)
	}
	if c.User != "idlejob" || c.Interval != defaultInterval || c.MinIdle != defaultMinIdle || len(c.Jobs) != 1 || !c.TTY.Enabled {
		t.Errorf("%+v", c)
	}
}

// The limits: [defaults]' apply to every job, a section's own keys win,
// max removes one, and cpu_weight defaults to the lowest.
func TestLimits(t *testing.T) {
	src := `[process-a]
cmd = a
gpus = 0
memory_max = 2G
[defaults]
memory_max = 8G
memory_high = 6.5G
pids_max = 512
cgroup = off
textfile_dir = /var/lib/prometheus/node-exporter
[process-b]
cmd = b
gpus = 1
cpu_weight = 50
pids_max = max
memory_high = infinity
`
	c, err := Parse(strings.NewReader(src), "/etc/idlemon.ini")
	if err != nil {
		t.Fatal(err)
	}
	if c.Cgroup != CgroupOff || c.TextfileDir != "/var/lib/prometheus/node-exporter" {
		t.Errorf("cgroup %q, textfile_dir %q", c.Cgroup, c.TextfileDir)
	}
	want := []Limits{
		{CPUWeight: 1, MemoryMax: 2 << 30, PidsMax: 512}, // [defaults]' memory_high is above its own max: dropped
		{CPUWeight: 50, MemoryMax: 8 << 30},
	}
	for i, j := range c.Jobs {
		if j.Limits != want[i] {
			t.Errorf("%s: limits %+v, want %+v", j.Name, j.Limits, want[i])
		}
	}
	d, err := Parse(strings.NewReader("[process-a]\ncmd = a\ngpus = 0\n"), "x.ini")
	if err != nil {
		t.Fatal(err)
	}
	if d.Cgroup != CgroupAuto || d.Jobs[0].Limits != (Limits{CPUWeight: DefaultCPUWeight}) {
		t.Errorf("defaults: cgroup %q, limits %+v", d.Cgroup, d.Jobs[0].Limits)
	}
}

func TestLimitErrors(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"weight zero", "[defaults]\ncpu_weight = 0\n", `x.ini:2: cpu_weight: "0" is not a whole number from 1 to 10000`},
		{"weight big", "[process-a]\ncmd = a\ngpus = 0\ncpu_weight = 10001\n", `x.ini:4: cpu_weight:`},
		{"size unit", "[defaults]\nmemory_max = 8X\n", `x.ini:2: memory_max: "8X" is not a size: unknown unit "X"`},
		{"size negative", "[defaults]\nmemory_max = -1G\n", `memory_max: "-1G" is not a size`},
		{"size tiny", "[defaults]\nmemory_high = 100\n", `memory_high: "100" is not a size: out of range`},
		{"size nan", "[defaults]\nmemory_max = NaNG\n", `memory_max: "NaNG" is not a size`},
		{"high over max", "[defaults]\nmemory_max = 1G\nmemory_high = 2G\n", `memory_high: 2147483648 bytes is above memory_max`},
		{"pids", "[defaults]\npids_max = 0\n", `x.ini:2: pids_max: "0" is not a number of processes`},
		{"cgroup relative", "[defaults]\ncgroup = idlemon\n", `x.ini:2: cgroup: "idlemon" is not auto, off or an absolute folder`},
		{"textfile empty", "[defaults]\ntextfile_dir =\n", `textfile_dir: empty`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tt.src), "x.ini")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"4096": 4096, "512M": 512 << 20, "512MiB": 512 << 20, "8G": 8 << 30, "8 GB": 8 << 30,
		"1.5g": 3 << 29, "2T": 2 << 40, "max": 0, "Infinity": 0, "64k": 64 << 10,
	} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "G", "1e30", "-5M", "5 Z", "inf", "0x10M"} {
		if n, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, n)
		}
	}
}
