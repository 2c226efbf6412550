package cluster

import (
	stdcmp "cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/health"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/reservations"
)

var now = time.Date(2026, 11, 23, 14, 0, 0, 0, time.UTC)

// build groups rows into a Cluster as render does, row by row.
func build(rows []loaddata.Row, o Options) *Cluster {
	b := NewBuilder(o)
	for i := range rows {
		b.Add(&rows[i])
	}
	return b.Cluster()
}

// gpuRow is a row of an ok host's GPU with 80 GiB and mem MiB used.
func gpuRow(t testing.TB, host string, idx int64, mem float64) loaddata.Row {
	t.Helper()
	return loaddata.Row{Timestamp: "2026-11-23T13:58:00Z", Host: host, HostStatus: hoststatus.OK,
		GPUIndex: loaddata.IntOf(idx), GPUUUID: "GPU-x", GPUName: "NVIDIA H100 80GB HBM3",
		MemUsedMiB: loaddata.Num(mem), MemTotalMiB: loaddata.Num(81559), GPUUtilPct: loaddata.Num(0)}
}

// withProc adds a process to a GPU row.
func withProc(r loaddata.Row, user, command string, mem float64, preemptible bool) loaddata.Row {
	r.PID = loaddata.IntOf(4242)
	r.User = user
	r.Command = command
	r.ProcessMemMiB = loaddata.Num(mem)
	r.Preemptible = loaddata.Flag(preemptible)
	return r
}

func TestClassify(t *testing.T) {
	opts := Options{FreeMemMiB: 1024, Ignore: []string{"nvidia-persistenced", "Xorg"}, Now: now}
	until := now.Add(time.Hour)
	tests := []struct {
		name      string
		rows      func(t testing.TB) []loaddata.Row
		resv      []reservations.Reservation
		wantState string
		wantNotes []string
	}{
		{"idle", func(t testing.TB) []loaddata.Row { return []loaddata.Row{gpuRow(t, "h", 0, 3)} }, nil, Free, nil},
		{"a process", func(t testing.TB) []loaddata.Row {
			return []loaddata.Row{withProc(gpuRow(t, "h", 0, 30000), "alice", "python train.py", 29000, false)}
		}, nil, Busy, nil},
		{"a process using little memory is still busy", func(t testing.TB) []loaddata.Row {
			return []loaddata.Row{withProc(gpuRow(t, "h", 0, 300), "alice", "python", 290, false)}
		}, nil, Busy, nil},
		{"memory at the threshold, no process", func(t testing.TB) []loaddata.Row { return []loaddata.Row{gpuRow(t, "h", 0, 1024)} },
			nil, Busy, []string{noteMemNoProc}},
		{"memory just under the threshold", func(t testing.TB) []loaddata.Row { return []loaddata.Row{gpuRow(t, "h", 0, 1023)} },
			nil, Free, nil},
		{"utilization alone never makes busy (idle L40S at 100 %)", func(t testing.TB) []loaddata.Row {
			r := gpuRow(t, "h", 0, 0)
			r.GPUUtilPct = loaddata.Num(100)
			return []loaddata.Row{r}
		}, nil, Free, nil},
		{"ignored process by base name", func(t testing.TB) []loaddata.Row {
			return []loaddata.Row{withProc(gpuRow(t, "h", 0, 600), "root", "/usr/bin/nvidia-persistenced --user nvidia-persistenced", 0, false)}
		}, nil, Free, nil},
		{"ignored Xorg's memory is not counted", func(t testing.TB) []loaddata.Row {
			return []loaddata.Row{withProc(gpuRow(t, "h", 0, 1500), "root", "/usr/lib/xorg/Xorg vt1 -displayfd 3", 600, false)}
		}, nil, Free, nil},
		{"a process named like a daemon but holding a training run's memory is busy", func(t testing.TB) []loaddata.Row {
			return []loaddata.Row{withProc(gpuRow(t, "h", 0, 70500), "mallory", "nvidia-persistenced", 70000, false)}
		}, nil, Busy, nil},
		{"ignored plus a real process", func(t testing.TB) []loaddata.Row {
			return []loaddata.Row{
				withProc(gpuRow(t, "h", 0, 1500), "root", "Xorg", 200, false),
				withProc(gpuRow(t, "h", 0, 1500), "bob", "blender", 1200, false),
			}
		}, nil, Busy, nil},
		{"preemptible job: free with a note", func(t testing.TB) []loaddata.Row {
			return []loaddata.Row{withProc(gpuRow(t, "h", 0, 40000), "idlejob", "python sweep.py", 39990, true)}
		}, nil, Free, []string{noteIdleJob}},
		{"preemptible job with unknown memory: free", func(t testing.TB) []loaddata.Row {
			r := withProc(gpuRow(t, "h", 0, 40000), "idlejob", "python sweep.py", 0, true)
			r.ProcessMemMiB = loaddata.Number{}
			return []loaddata.Row{r}
		}, nil, Free, []string{noteIdleJob}},
		{"preemptible and a real process: busy", func(t testing.TB) []loaddata.Row {
			return []loaddata.Row{
				withProc(gpuRow(t, "h", 0, 40000), "idlejob", "python sweep.py", 20000, true),
				withProc(gpuRow(t, "h", 0, 40000), "alice", "python train.py", 20000, false),
			}
		}, nil, Busy, nil},
		{"reserved free GPU", func(t testing.TB) []loaddata.Row { return []loaddata.Row{gpuRow(t, "h", 0, 0)} },
			[]reservations.Reservation{{Host: "h", GPUs: []int{0}, Name: "carol", Until: until}}, Reserved, nil},
		{"reservation of another GPU", func(t testing.TB) []loaddata.Row { return []loaddata.Row{gpuRow(t, "h", 0, 0)} },
			[]reservations.Reservation{{Host: "h", GPUs: []int{1}, Name: "carol", Until: until}}, Free, nil},
		{"whole-host reservation, host name in another case", func(t testing.TB) []loaddata.Row { return []loaddata.Row{gpuRow(t, "h", 0, 0)} },
			[]reservations.Reservation{{Host: "H", Name: "carol"}}, Reserved, nil},
		{"past reservation ignored", func(t testing.TB) []loaddata.Row { return []loaddata.Row{gpuRow(t, "h", 0, 0)} },
			[]reservations.Reservation{{Host: "h", Name: "carol", Until: now.Add(-time.Minute)}}, Free, nil},
		{"reserved but busy stays busy", func(t testing.TB) []loaddata.Row {
			return []loaddata.Row{withProc(gpuRow(t, "h", 0, 30000), "alice", "python", 29000, false)}
		}, []reservations.Reservation{{Host: "h", Name: "carol"}}, Busy, nil},
		{"lost GPU", func(t testing.TB) []loaddata.Row {
			return []loaddata.Row{{Timestamp: "2026-11-23T13:58:00Z", Host: "h", HostStatus: hoststatus.OK,
				GPUBusID: "0000:9a:00.0", GPUError: "GPU is lost; reboot the system to recover this GPU"}}
		}, nil, Failed, nil},
		{"MIG: whole-GPU row, no utilization, processes of several instances", func(t testing.TB) []loaddata.Row {
			r := gpuRow(t, "h", 0, 11125)
			r.GPUUtilPct = loaddata.Number{}
			return []loaddata.Row{
				withProc(r, "", "/root/tools/memhog", 2296, false),
				withProc(r, "alice", "./gpu_burn 60", 7484, false),
			}
		}, nil, Busy, nil},
		{"MIG idle: instances' overhead under the threshold", func(t testing.TB) []loaddata.Row {
			r := gpuRow(t, "h", 0, 90)
			r.GPUUtilPct = loaddata.Number{}
			return []loaddata.Row{r}
		}, nil, Free, nil},
		{"memory unknown, no process", func(t testing.TB) []loaddata.Row {
			r := gpuRow(t, "h", 0, 0)
			r.MemUsedMiB = loaddata.Number{}
			return []loaddata.Row{r}
		}, nil, Free, []string{noteMemUnknown}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := opts
			o.Reservations = tt.resv
			c := build(tt.rows(t), o)
			if len(c.Hosts) != 1 || len(c.Hosts[0].GPUs) != 1 {
				t.Fatalf("want 1 host with 1 GPU, got %+v", c.Hosts)
			}
			g := c.Hosts[0].GPUs[0]
			if g.State != tt.wantState {
				t.Errorf("state %s, want %s", g.State, tt.wantState)
			}
			if diff := cmp.Diff(tt.wantNotes, g.Notes); diff != "" {
				t.Errorf("notes (-want +got):\n%s", diff)
			}
			if c.Count[tt.wantState] != 1 || c.GPUs != 1 {
				t.Errorf("counts %v of %d", c.Count, c.GPUs)
			}
		})
	}
}

func TestFailedHost(t *testing.T) {
	rows := []loaddata.Row{
		gpuRow(t, "a", 0, 0),
		{Timestamp: "2026-11-23T13:59:00Z", Host: "b", HostStatus: hoststatus.Timeout, HostError: "no answer in 20s"},
	}
	c := build(rows, Options{FreeMemMiB: 1024, Now: now,
		Reservations: []reservations.Reservation{{Host: "b", Name: "dan"}}})
	if c.Down != 1 || c.GPUs != 1 || len(c.Hosts) != 2 {
		t.Fatalf("down %d, gpus %d, hosts %d", c.Down, c.GPUs, len(c.Hosts))
	}
	b := c.Hosts[1]
	if b.Up() || b.Error != "no answer in 20s" || len(b.GPUs) != 0 || b.Reserved == nil {
		t.Errorf("down host: %+v", b)
	}
	if want := time.Date(2026, 11, 23, 13, 59, 0, 0, time.UTC); !c.DataTime.Equal(want) {
		t.Errorf("data time %v, want the newest row's %v", c.DataTime, want)
	}
}

func TestUsersAndModels(t *testing.T) {
	pid := func(r loaddata.Row, pid int64) loaddata.Row { r.PID = loaddata.IntOf(pid); return r }
	rows := []loaddata.Row{
		withProc(gpuRow(t, "a", 0, 30000), "alice", "python", 20000, false),
		pid(withProc(gpuRow(t, "a", 0, 30000), "alice", "python", 10000, false), 4243), // a second process, same GPU
		pid(withProc(gpuRow(t, "a", 1, 30000), "alice", "python", 30000, false), 4244),
		withProc(gpuRow(t, "b", 0, 5000), "bob", "python", 5000, false),
		withProc(gpuRow(t, "b", 1, 5000), "idlejob", "python", 5000, true),
		gpuRow(t, "b", 2, 0),
	}
	rows[5].GPUName = "NVIDIA GeForce RTX 2080 SUPER"
	c := build(rows, Options{FreeMemMiB: 1024, Now: now, HostNames: map[string]string{"b": "Bravo"},
		GPUNames: map[string]string{"nvidia h100 80gb hbm3": "H100"}})
	want := []*User{
		{Name: "alice", GPUs: 2, MemMiB: 60000, Procs: 3, Hosts: []string{"a"}},
		{Name: "bob", GPUs: 1, MemMiB: 5000, Procs: 1, Hosts: []string{"b"}},
	}
	if diff := cmp.Diff(want, c.Users); diff != "" {
		t.Errorf("users (-want +got):\n%s", diff)
	}
	wantModels := []*Model{{Name: "H100", Vendor: "nvidia", Free: 1, Total: 4}, {Name: "RTX 2080 SUPER", Vendor: "nvidia", Free: 1, Total: 1}}
	if diff := cmp.Diff(wantModels, c.Models); diff != "" {
		t.Errorf("models (-want +got):\n%s", diff)
	}
	if c.Hosts[1].Display != "Bravo" {
		t.Errorf("display name %q", c.Hosts[1].Display)
	}
}

func TestShortName(t *testing.T) {
	names := map[string]string{"nvidia a100-sxm4-80gb": "A100 80", "amd instinct mi250x/mi250": "MI250X"}
	const nv, amd = loaddata.VendorNVIDIA, loaddata.VendorAMD
	for _, tc := range []struct{ name, full, vendor, want string }{
		{"nvidia", "NVIDIA H100 80GB HBM3", nv, "H100 80GB HBM3"},
		{"geforce", "NVIDIA GeForce RTX 2080 SUPER", nv, "RTX 2080 SUPER"},
		{"tesla", "Tesla V100-SXM2-16GB", nv, "V100-SXM2-16GB"},
		{"nvidia rtx", "NVIDIA RTX A6000", nv, "RTX A6000"},
		{"vendor alone", "NVIDIA", nv, "NVIDIA"},
		{"empty", "", nv, ""},
		{"gpu_names", "NVIDIA A100-SXM4-80GB", nv, "A100 80"},
		{"gpu_names for amd", "AMD Instinct MI250X/MI250", amd, "MI250X"},
		// amd-smi's and rocm-smi 6's marketing names
		{"instinct", "AMD Instinct MI300X", amd, "MI300X"},
		{"instinct vf", "AMD Instinct MI300X VF", amd, "MI300X VF"},
		{"instinct pair", "AMD Instinct MI250X / MI250", amd, "MI250X / MI250"},
		{"radeon rx", "AMD Radeon RX 6700 XT", amd, "RX 6700 XT"},
		{"radeon rx 7900", "AMD Radeon RX 7900 XTX", amd, "RX 7900 XTX"},
		{"radeon pro", "AMD Radeon Pro W7900", amd, "Radeon Pro W7900"},
		{"radeon PRO", "AMD Radeon PRO W7800", amd, "Radeon PRO W7800"},
		{"radeon vii", "AMD Radeon VII", amd, "Radeon VII"},
		{"radeon alone", "AMD Radeon", amd, "Radeon"},
		{"amd alone", "AMD", amd, "AMD"},
		// older rocm-smi: the PCI database's chip name, the cards in brackets
		{"navi 22", "Navi 22 [Radeon RX 6700/6700 XT/6750 XT / 6800M/6850M XT]", amd, "RX 6700/6700 XT/6750 XT / 6800M/6850M XT"},
		{"arcturus", "Arcturus GL-XL [Instinct MI100]", amd, "MI100"},
		{"vega 20", "Vega 20 [Radeon Pro VII/Radeon Instinct MI50 32GB]", amd, "Radeon Pro VII/MI50 32GB"},
		{"aldebaran", "Aldebaran/MI200 [Instinct MI210]", amd, "MI210"},
		{"navi 21 pro", "Navi 21 GL-XL [Radeon PRO W6800]", amd, "Radeon PRO W6800"},
		{"empty brackets", "Navi 10 []", amd, "Navi 10 []"},
		{"nested brackets", "Navi 10 [[x]]", amd, "Navi 10 [[x]]"},
		{"bracket first", "[Instinct MI100]", amd, "[Instinct MI100]"},
		{"no space before the bracket", "n1233_[5-9%2]", amd, "n1233_[5-9%2]"},
		{"bracket not last", "Vega 20 [Radeon VII] rev c1", amd, "Vega 20 [Radeon VII] rev c1"},
		// each vendor's words are its own
		{"amd words on nvidia", "AMD Instinct MI300X", nv, "AMD Instinct MI300X"},
		{"brackets on nvidia", "Navi 22 [Radeon RX 6700]", nv, "Navi 22 [Radeon RX 6700]"},
		{"nvidia words on amd", "NVIDIA H100", amd, "NVIDIA H100"},
		{"another vendor", "NVIDIA AMD X", "intel", "NVIDIA AMD X"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := shortName(tc.full, tc.vendor, names); got != tc.want {
				t.Errorf("shortName(%q, %q) = %q, want %q", tc.full, tc.vendor, got, tc.want)
			}
		})
	}
}

func TestVendorOf(t *testing.T) {
	for _, tc := range []struct{ name, cell, want string }{
		{"older file", "", loaddata.VendorNVIDIA},
		{"nvidia", "nvidia", loaddata.VendorNVIDIA},
		{"amd", "amd", loaddata.VendorAMD},
		{"upper case", " AMD ", loaddata.VendorAMD},
		{"another", "intel", "intel"},
		{"long", strings.Repeat("x", 100), strings.Repeat("x", vendorMax-len("…")) + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := vendorOf(tc.cell); got != tc.want {
				t.Errorf("vendorOf(%q) = %q, want %q", tc.cell, got, tc.want)
			}
		})
	}
}

// A lab of both vendors: each GPU has its row's vendor (an older file's
// none is NVIDIA's), each model its GPUs', and the cluster both; an AMD
// GPU without utilization (a partition) is classified by its memory and
// processes as any GPU is.
func TestMixedVendors(t *testing.T) {
	amd := func(host string, idx int64, mem float64) loaddata.Row {
		r := gpuRow(t, host, idx, mem)
		r.GPUName, r.GPUVendor, r.MemTotalMiB, r.GPUUtilPct = "AMD Instinct MI300X", loaddata.VendorAMD, loaddata.Num(196592), loaddata.Number{}
		return r
	}
	nv := gpuRow(t, "both", 0, 0)
	nv.GPUVendor = loaddata.VendorNVIDIA
	rows := []loaddata.Row{
		gpuRow(t, "old", 0, 0), // an older file's row: no vendor
		nv,
		amd("both", 1, 0),
		withProc(amd("mi", 0, 150000), "alice", "python train.py", 150000, false),
		amd("mi", 1, 0),
	}
	c := build(rows, Options{FreeMemMiB: 1024, Now: now})
	var got []string
	for _, h := range c.Hosts {
		for _, g := range h.GPUs {
			got = append(got, fmt.Sprintf("%s/%s %s %s %s", h.Name, g.ID(), g.Vendor, g.Short, g.State))
		}
	}
	want := []string{"old/0 nvidia H100 80GB HBM3 free", "both/0 nvidia H100 80GB HBM3 free", "both/1 amd MI300X free",
		"mi/0 amd MI300X busy", "mi/1 amd MI300X free"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GPUs (-want +got):\n%s", diff)
	}
	wantModels := []*Model{{Name: "MI300X", Vendor: "amd", Free: 2, Total: 3}, {Name: "H100 80GB HBM3", Vendor: "nvidia", Free: 2, Total: 2}}
	if diff := cmp.Diff(wantModels, c.Models); diff != "" {
		t.Errorf("models (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"amd", "nvidia"}, c.Vendors); diff != "" {
		t.Errorf("vendors (-want +got):\n%s", diff)
	}
	if h := c.Hosts[1]; h.ModelName != "" {
		t.Errorf("host of both vendors: model name %q, want none", h.ModelName)
	}
}

// An AMD GPU's health rests on the one health reading its tools give,
// uncorrectable ECC errors: none is ok, some is degraded (the default
// policy) and the GPU stays free; the NVIDIA-only readings, empty, are no
// condition.
func TestAMDHealthFromECCAlone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ecc   loaddata.Number
		state string
		conds []string
	}{
		{"not known", loaddata.Number{}, health.OK, nil},
		{"none", loaddata.Num(0), health.OK, nil},
		{"two", loaddata.Num(2), health.Degraded, []string{health.ECCUncorrected}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := gpuRow(t, "mi300a", 0, 283)
			r.GPUName, r.GPUVendor, r.MemTotalMiB, r.ECCUncorrected = "AMD Instinct MI300X", loaddata.VendorAMD, loaddata.Num(196592), tc.ecc
			g := build([]loaddata.Row{r}, Options{FreeMemMiB: 1024, Now: now, Health: health.DefaultPolicy()}).Hosts[0].GPUs[0]
			var conds []string
			for _, f := range g.Health.Findings {
				conds = append(conds, f.Condition)
			}
			if g.Health.State != tc.state || g.State != Free || !slices.Equal(conds, tc.conds) {
				t.Errorf("health %q %v, state %s; want %q %v, free", g.Health.State, conds, g.State, tc.state, tc.conds)
			}
		})
	}
}

// Two vendors' models given one short name by [gpu_names] are one model
// of no one vendor.
func TestModelOfTwoVendors(t *testing.T) {
	a := gpuRow(t, "a", 0, 0)
	b := gpuRow(t, "b", 0, 0)
	b.GPUName, b.GPUVendor = "AMD Instinct MI300X", loaddata.VendorAMD
	c := gpuRow(t, "c", 0, 0)
	names := map[string]string{"nvidia h100 80gb hbm3": "big", "amd instinct mi300x": "big"}
	got := build([]loaddata.Row{a, b, c}, Options{FreeMemMiB: 1024, Now: now, GPUNames: names}).Models
	if diff := cmp.Diff([]*Model{{Name: "big", Free: 3, Total: 3}}, got); diff != "" {
		t.Errorf("models (-want +got):\n%s", diff)
	}
}

// A pid on several GPUs of a host is one process (one row per GPU in the
// CSV); the same pid on another host is another process.
func TestUserProcessesAreDistinctPIDsPerHost(t *testing.T) {
	var rows []loaddata.Row
	for i := int64(0); i < 8; i++ {
		r := withProc(gpuRow(t, "h100-a01", i, 70000), "alice", "torchrun train.py", 69000, false)
		r.PID = loaddata.IntOf(401233)
		rows = append(rows, r)
	}
	for i := int64(0); i < 4; i++ {
		r := withProc(gpuRow(t, "h200-b01", i, 90000), "alice", "python sweep.py", 89000, false)
		r.PID = loaddata.IntOf(500000 + i)
		rows = append(rows, r)
	}
	// bob's pid 401233 on another host is his own process
	r := withProc(gpuRow(t, "h200-b02", 0, 9000), "bob", "python", 8000, false)
	r.PID = loaddata.IntOf(401233)
	rows = append(rows, r)
	// two processes ps could not number are two
	r = withProc(gpuRow(t, "h200-b02", 1, 9000), "bob", "python", 4000, false)
	r.PID = loaddata.Int{}
	rows = append(rows, r, r)
	c := build(rows, Options{FreeMemMiB: 1024, Now: now})
	want := []*User{
		{Name: "alice", GPUs: 12, MemMiB: 8*69000 + 4*89000, Procs: 5, Hosts: []string{"h100-a01", "h200-b01"}},
		{Name: "bob", GPUs: 2, MemMiB: 16000, Procs: 3, Hosts: []string{"h200-b02"}},
	}
	if diff := cmp.Diff(want, c.Users); diff != "" {
		t.Errorf("users (-want +got):\n%s", diff)
	}
}

// Every GPU counts under a model, so the models add up to the total: a lost
// GPU (no name) under its host's model, or under "" when the host mixes
// models.
func TestModelsAddUp(t *testing.T) {
	lost := func(host string) loaddata.Row {
		return loaddata.Row{Timestamp: "2026-11-23T13:58:00Z", Host: host, HostStatus: hoststatus.OK,
			GPUBusID: "0000:9a:00.0", GPUError: "GPU is lost; reboot the system to recover this GPU"}
	}
	mixed := gpuRow(t, "m", 1, 0)
	mixed.GPUName = "NVIDIA GeForce RTX 2080 SUPER"
	rows := []loaddata.Row{
		gpuRow(t, "a", 0, 0), gpuRow(t, "a", 1, 0), lost("a"),
		gpuRow(t, "m", 0, 0), mixed, lost("m"),
		{Timestamp: "2026-11-23T13:58:00Z", Host: "down", HostStatus: hoststatus.Driver, HostError: "no driver"},
	}
	c := build(rows, Options{FreeMemMiB: 1024, Now: now, GPUNames: map[string]string{"nvidia h100 80gb hbm3": "H100"}})
	want := []*Model{
		{Name: "H100", Vendor: "nvidia", Free: 3, Failed: 1, Total: 4},
		{Name: "RTX 2080 SUPER", Vendor: "nvidia", Free: 1, Total: 1},
		{Name: "", Vendor: "nvidia", Failed: 1, Total: 1},
	}
	if diff := cmp.Diff(want, c.Models); diff != "" {
		t.Errorf("models (-want +got):\n%s", diff)
	}
	n := 0
	for _, m := range c.Models {
		n += m.Total
	}
	if n != c.GPUs || c.GPUs != 6 {
		t.Errorf("models add up to %d, GPUs %d (want 6)", n, c.GPUs)
	}
}

// Two GPUs that nvidia-smi gave the same index (fetch warns) stay two GPUs,
// each with its own readings and processes, not one with both processes.
func TestDuplicateIndexKeptApart(t *testing.T) {
	a := withProc(gpuRow(t, "h", 0, 30000), "alice", "train", 30000, false)
	a.GPUUUID = "GPU-a"
	a2 := withProc(gpuRow(t, "h", 0, 30000), "carol", "eval", 100, false)
	a2.GPUUUID, a2.PID = "GPU-a", loaddata.IntOf(5151)
	c := gpuRow(t, "h", 0, 4)
	c.GPUUUID = "GPU-c"
	cl := build([]loaddata.Row{a, a2, c}, Options{FreeMemMiB: 1024, Now: now})
	gpus := cl.Hosts[0].GPUs
	if len(gpus) != 2 || cl.GPUs != 2 {
		t.Fatalf("%d GPUs on the host (%d in all), want 2", len(gpus), cl.GPUs)
	}
	if gpus[0].UUID != "GPU-a" || len(gpus[0].Procs) != 2 || gpus[0].State != Busy {
		t.Errorf("first GPU: uuid %s, %d processes, %s; want GPU-a, 2, busy", gpus[0].UUID, len(gpus[0].Procs), gpus[0].State)
	}
	if gpus[1].UUID != "GPU-c" || len(gpus[1].Procs) != 0 || gpus[1].State != Free {
		t.Errorf("second GPU: uuid %s, %d processes, %s; want GPU-c, none, free", gpus[1].UUID, len(gpus[1].Procs), gpus[1].State)
	}
	// each keeps a name of its own (metrics.prom's gpu label, the history)
	if gpus[0].ID() != "GPU-a" || gpus[1].ID() != "GPU-c" {
		t.Errorf("ids %q and %q, want the UUIDs", gpus[0].ID(), gpus[1].ID())
	}
}

// inJob puts a process row in a Slurm job and a container (either may be
// "").
func inJob(r loaddata.Row, job, name, partition, ctr, ctrName, pod string) loaddata.Row {
	r.SlurmJob, r.SlurmJobName, r.SlurmPartition = job, name, partition
	r.Container, r.ContainerName, r.Pod = ctr, ctrName, pod
	return r
}

// billed puts a process row's Slurm job in account.
func billed(r loaddata.Row, account string) loaddata.Row {
	r.SlurmAccount = account
	return r
}

// The seven attribution columns reach each process whole, as the CSV has
// them; a row of an older fetch (no such columns) leaves them empty.
func TestProcessAttribution(t *testing.T) {
	rows := []loaddata.Row{
		billed(inJob(withProc(gpuRow(t, "h", 0, 30000), "alice", "python train.py", 29000, false),
			"1233_5", "llama <7b>", "gpu", "", "", ""), "vision-lab"),
		inJob(withProc(gpuRow(t, "h", 1, 30000), "root", "python serve.py", 29000, false),
			"", "", "", "3f2a9c1e4b7d", "vllm-server", "6a3f0a43-5b7e-4c1e-9a8d-2f1e0c9b7a11"),
		withProc(gpuRow(t, "h", 2, 30000), "bob", "python", 29000, false),
	}
	c := build(rows, Options{FreeMemMiB: 1024, Now: now})
	var got []Proc
	for _, g := range c.Hosts[0].GPUs {
		for _, p := range g.Procs {
			got = append(got, *p)
		}
	}
	want := []Proc{
		{SlurmJob: "1233_5", SlurmJobName: "llama <7b>", SlurmPartition: "gpu", SlurmAccount: "vision-lab"},
		{Container: "3f2a9c1e4b7d", ContainerName: "vllm-server", Pod: "6a3f0a43-5b7e-4c1e-9a8d-2f1e0c9b7a11"},
		{},
	}
	attribution := cmp.Transformer("attribution", func(p Proc) [7]string {
		return [7]string{p.SlurmJob, p.SlurmJobName, p.SlurmPartition, p.SlurmAccount, p.Container, p.ContainerName, p.Pod}
	})
	if diff := cmp.Diff(want, got, attribution); diff != "" {
		t.Errorf("attribution (-want +got):\n%s", diff)
	}
}

// Who a cell names for a process: root in a container is the container,
// by name, else by its short id; everyone else is their user.
func TestProcHolder(t *testing.T) {
	for _, tt := range []struct {
		name string
		p    Proc
		want string
	}{
		{"root in a named container", Proc{User: "root", Container: "3f2a9c1e4b7d", ContainerName: "vllm-server"}, "vllm-server"},
		{"root in a container without a name", Proc{User: "root", Container: "3f2a9c1e4b7d"}, "3f2a9c1e4b7d"},
		{"root, no container", Proc{User: "root"}, "root"},
		{"root in a pod whose container is not known", Proc{User: "root", Pod: "6a3f0a43-5b7e-4c1e-9a8d-2f1e0c9b7a11"}, "root"},
		{"root in a Slurm job", Proc{User: "root", SlurmJob: "1233"}, "root"},
		{"alice in a container", Proc{User: "alice", Container: "3f2a9c1e4b7d", ContainerName: "vllm-server"}, "alice"},
		{"alice in a Slurm job", Proc{User: "alice", SlurmJob: "1233_5", SlurmJobName: "llama"}, "alice"},
		{"user unknown in a container", Proc{Container: "3f2a9c1e4b7d", ContainerName: "vllm-server"}, ""},
		{"Root is not root", Proc{User: "Root", ContainerName: "x"}, "Root"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Holder(); got != tt.want {
				t.Errorf("Holder() = %q, want %q", got, tt.want)
			}
		})
	}
}

// A user's jobs and containers: those of the processes that hold a GPU,
// each once, in natural order; a container by name, else by id.
func TestUserJobsAndContainers(t *testing.T) {
	pid := func(r loaddata.Row, pid int64) loaddata.Row { r.PID = loaddata.IntOf(pid); return r }
	alice := func(host string, idx, p int64, job string) loaddata.Row {
		return pid(inJob(withProc(gpuRow(t, host, idx, 30000), "alice", "python", 29000, false), job, "train", "gpu", "", "", ""), p)
	}
	root := func(host string, idx, p int64, ctr, name string) loaddata.Row {
		return pid(inJob(withProc(gpuRow(t, host, idx, 30000), "root", "python", 29000, false), "", "", "", ctr, name, ""), p)
	}
	rows := []loaddata.Row{
		alice("a", 0, 1, "1233_10"), alice("a", 1, 1, "1233_10"), // one process on two GPUs
		alice("a", 2, 2, "1233_5"), alice("b", 0, 3, "998"), alice("b", 1, 4, "1233_10"),
		alice("b", 2, 5, ""),
		root("c", 0, 6, "3f2a9c1e4b7d", "vllm-server"), root("c", 1, 7, "0f1e2d3c4b5a", ""),
		root("d", 0, 8, "aaaaaaaaaaaa", "vllm-server"), // the same name on another host: named once
		root("d", 1, 9, "", ""),
		// the idle-time job's and ignored processes' hold nothing
		pid(inJob(withProc(gpuRow(t, "e", 0, 30000), "alice", "python sweep.py", 29000, true), "7", "sweep", "preempt", "", "", ""), 10),
		pid(inJob(withProc(gpuRow(t, "e", 1, 600), "root", "Xorg", 20, false), "", "", "", "bbbbbbbbbbbb", "display", ""), 11),
	}
	c := build(rows, Options{FreeMemMiB: 1024, Now: now, Ignore: []string{"Xorg"}})
	type jc struct{ Jobs, Containers []string }
	got := map[string]jc{}
	for _, u := range c.Users {
		got[u.Name] = jc{u.Jobs, u.Containers}
	}
	want := map[string]jc{
		"alice": {Jobs: []string{"998", "1233_5", "1233_10"}},
		"root":  {Containers: []string{"0f1e2d3c4b5a", "vllm-server"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("jobs and containers (-want +got):\n%s", diff)
	}
}

func TestNaturalCompare(t *testing.T) {
	ordered := []string{"", "0", "00", "01", "1", "2", "10", "998", "1233", "1233_2", "1233_10", "1233_[5-9]", "1234",
		"a", "gpu2", "gpu10", "gpu10a", "vllm-server"}
	for i, a := range ordered {
		for j, b := range ordered {
			if got, want := naturalCompare(a, b), stdcmp.Compare(i, j); got != want {
				t.Errorf("naturalCompare(%q, %q) = %d, want %d", a, b, got, want)
			}
		}
	}
}

// healthRow is an idle GPU row with its health cells set by set.
func healthRow(t testing.TB, set func(r *loaddata.Row)) loaddata.Row {
	t.Helper()
	r := gpuRow(t, "h", 0, 3)
	r.ECCMode, r.ECCUncorrected = "enabled", loaddata.Num(0)
	r.RemappedRowsPending, r.RemappedRowsFailure = loaddata.TriOf(false), loaddata.TriOf(false)
	r.ClockEvents = "gpu_idle"
	set(&r)
	return r
}

func TestHealthClassification(t *testing.T) {
	def := health.DefaultPolicy()
	moved := health.DefaultPolicy()
	moved.Failed, moved.Degraded = append(moved.Failed, health.RemapPending), []string{health.ECCUncorrected}
	tests := []struct {
		name      string
		policy    health.Policy
		set       func(r *loaddata.Row)
		busy      bool // a process holds the GPU
		wantState string
		want      health.Health
	}{
		{"healthy", def, func(r *loaddata.Row) {}, false, Free, health.Health{}},
		{"lost: the row's gpu_error", def, func(r *loaddata.Row) {
			*r = loaddata.Row{Timestamp: r.Timestamp, Host: "h", HostStatus: hoststatus.OK, GPUBusID: "00000000:3B:00.0",
				GPUError: "listed by the driver, not reported by nvidia-smi"}
		}, false, Failed, health.Health{State: health.Failed, Findings: []health.Finding{
			{Condition: health.Lost, Severity: health.Failed, Detail: "listed by the driver, not reported by nvidia-smi"}}}},
		{"remap failure", def, func(r *loaddata.Row) { r.RemappedRowsFailure = loaddata.TriOf(true) }, false, Failed,
			failedBy(health.RemapFailure, "a row remapping failed: the GPU needs service")},
		{"a fatal XID fails even a busy GPU", def, func(r *loaddata.Row) { r.XIDs = "13,79" }, true, Failed,
			failedBy(health.XIDFatal, "XID 79 logged since the last poll")},
		{"remap pending keeps free", def, func(r *loaddata.Row) { r.RemappedRowsPending = loaddata.TriOf(true) }, false, Free,
			degradedBy(health.RemapPending, "a row remapping is pending: reset the GPU when idle")},
		{"retired pages pending keeps busy", def, func(r *loaddata.Row) { r.RetiredPagesPending = loaddata.TriOf(true) }, true, Busy,
			degradedBy(health.RetiredPagesPending, "a page retirement is pending: reset the GPU when idle")},
		{"uncorrected ECC", def, func(r *loaddata.Row) { r.ECCUncorrected = loaddata.Num(3) }, false, Free,
			degradedBy(health.ECCUncorrected, "3 uncorrectable ECC errors since the driver loaded")},
		{"warning XID", def, func(r *loaddata.Row) { r.XIDs = "94" }, false, Free,
			degradedBy(health.XIDWarning, "XID 94 logged since the last poll")},
		{"an application's XID is no condition", def, func(r *loaddata.Row) { r.XIDs = "13,31,43,45" }, false, Free, health.Health{}},
		{"power brake", def, func(r *loaddata.Row) { r.ClockEvents = "sw_power_cap hw_power_brake" }, false, Free,
			degradedBy(health.HWPowerBrake, "clocks held down by a power brake")},
		{"hardware thermal", def, func(r *loaddata.Row) { r.ClockEvents = "hw_thermal" }, false, Free,
			degradedBy(health.HWThermal, "clocks held down by hardware thermal slowdown")},
		{"hardware slowdown", def, func(r *loaddata.Row) { r.ClockEvents = "hw_slowdown" }, false, Free,
			degradedBy(health.HWSlowdown, "clocks held down by hardware slowdown")},
		{"software thermal", def, func(r *loaddata.Row) { r.ClockEvents = "sw_thermal" }, false, Free,
			degradedBy(health.SWThermal, "clocks cut by the driver for heat")},
		{"a power cap is no condition", def, func(r *loaddata.Row) { r.ClockEvents = "sw_power_cap" }, false, Free, health.Health{}},
		{"failed and degraded together: failed", def, func(r *loaddata.Row) {
			r.RemappedRowsFailure, r.RemappedRowsPending = loaddata.TriOf(true), loaddata.TriOf(true)
		}, false, Failed, health.Health{State: health.Failed, Findings: []health.Finding{
			{Condition: health.RemapFailure, Severity: health.Failed, Detail: "a row remapping failed: the GPU needs service"},
			{Condition: health.RemapPending, Severity: health.Degraded, Detail: "a row remapping is pending: reset the GPU when idle"}}}},
		{"policy: remap pending made failed", moved, func(r *loaddata.Row) { r.RemappedRowsPending = loaddata.TriOf(true) }, false, Failed,
			failedBy(health.RemapPending, "a row remapping is pending: reset the GPU when idle")},
		{"policy: hw slowdown ignored", moved, func(r *loaddata.Row) { r.ClockEvents = "hw_slowdown" }, false, Free, health.Health{}},
		{"no policy: nothing assessed", health.Policy{}, func(r *loaddata.Row) { r.RemappedRowsFailure = loaddata.TriOf(true) }, false, Free, health.Health{}},
		{"readings not known are never a condition", def, func(r *loaddata.Row) {
			r.ECCMode, r.ECCUncorrected = "", loaddata.Number{}
			r.RetiredPagesPending, r.RemappedRowsPending, r.RemappedRowsFailure = loaddata.Tri{}, loaddata.Tri{}, loaddata.Tri{}
			r.ClockEvents, r.XIDs = "[N/A]", "[N/A]"
		}, false, Free, health.Health{}},
		{"absurd ECC counts are not believed", def, func(r *loaddata.Row) { r.ECCUncorrected = loaddata.Num(18446744073709551615) }, false, Free, health.Health{}},
		{"negative ECC counts are not believed", def, func(r *loaddata.Row) { r.ECCUncorrected = loaddata.Num(-1) }, false, Free, health.Health{}},
		{"garbage around an XID", def, func(r *loaddata.Row) { r.XIDs = "x, 0,-79, 99999999999999999999,48 ,," }, false, Failed,
			failedBy(health.XIDFatal, "XID 48 logged since the last poll")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := healthRow(t, tc.set)
			if tc.busy {
				r = withProc(r, "alice", "python train.py", 1000, false)
			}
			c := build([]loaddata.Row{r}, Options{FreeMemMiB: 1024, Now: now, Health: tc.policy})
			g := c.Hosts[0].GPUs[0]
			if g.State != tc.wantState {
				t.Errorf("state %s, want %s", g.State, tc.wantState)
			}
			if diff := cmp.Diff(tc.want, g.Health); diff != "" {
				t.Errorf("health (-want +got):\n%s", diff)
			}
			wantDegraded := 0
			if tc.want.State == health.Degraded {
				wantDegraded = 1
			}
			if c.Degraded != wantDegraded || c.Hosts[0].Degraded != wantDegraded {
				t.Errorf("degraded: cluster %d, host %d, want %d", c.Degraded, c.Hosts[0].Degraded, wantDegraded)
			}
		})
	}
}

func failedBy(cond, detail string) health.Health {
	return health.Health{State: health.Failed, Findings: []health.Finding{{Condition: cond, Severity: health.Failed, Detail: detail}}}
}

func degradedBy(cond, detail string) health.Health {
	return health.Health{State: health.Degraded, Findings: []health.Finding{{Condition: cond, Severity: health.Degraded, Detail: detail}}}
}

func TestParseXIDsIsBounded(t *testing.T) {
	var cell strings.Builder
	for i := range 100000 {
		fmt.Fprintf(&cell, "%d,", i%1000+1)
	}
	if got := parseXIDs(cell.String()); len(got) != xidsMax {
		t.Errorf("%d XIDs kept, want %d", len(got), xidsMax)
	}
	// repeats count once: forty 13s do not push the 79 out
	if got := parseXIDs(strings.Repeat("13,", 40) + "79"); !slices.Equal(got, []int{13, 79}) {
		t.Errorf("parseXIDs(13 x 40, 79) = %v, want [13 79]", got)
	}
}

func TestFailedReason(t *testing.T) {
	r := healthRow(t, func(r *loaddata.Row) {
		r.RemappedRowsFailure, r.XIDs = loaddata.TriOf(true), "79"
		r.ECCUncorrected = loaddata.Num(2)
	})
	g := build([]loaddata.Row{r}, Options{Now: now, Health: health.DefaultPolicy()}).Hosts[0].GPUs[0]
	want := "a row remapping failed: the GPU needs service; XID 79 logged since the last poll"
	if got := g.FailedReason(); got != want {
		t.Errorf("FailedReason() = %q, want %q", got, want)
	}
}

func TestDegradedCountedInSubsets(t *testing.T) {
	bad := func(host string) loaddata.Row {
		r := gpuRow(t, host, 0, 3)
		r.ClockEvents = "hw_slowdown"
		return r
	}
	c := build([]loaddata.Row{bad("a"), gpuRow(t, "b", 0, 3), bad("c")}, Options{Now: now, Health: health.DefaultPolicy()})
	if c.Degraded != 2 {
		t.Errorf("cluster: %d degraded, want 2", c.Degraded)
	}
	if s := c.Subset(c.Hosts[:2], nil); s.Degraded != 1 {
		t.Errorf("subset of a and b: %d degraded, want 1", s.Degraded)
	}
}

func TestSMPctBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   loaddata.Number
		want loaddata.Number
	}{
		{"not given", loaddata.Number{}, loaddata.Number{}},
		{"idle", loaddata.Num(0), loaddata.Num(0)},
		{"busy", loaddata.Num(97.5), loaddata.Num(97.5)},
		{"all of it", loaddata.Num(100), loaddata.Num(100)},
		{"negative", loaddata.Num(-1), loaddata.Number{}},
		{"absurd", loaddata.Num(1e300), loaddata.Number{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := withProc(gpuRow(t, "h", 0, 3000), "alice", "python", 2000, false)
			r.ProcessSMPct = tc.in
			p := build([]loaddata.Row{r}, Options{Now: now}).Hosts[0].GPUs[0].Procs[0]
			if p.SMPct != tc.want {
				t.Errorf("SMPct %+v, want %+v", p.SMPct, tc.want)
			}
		})
	}
}
