package render

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
)

// statusBudget10k is status.json's size at 10,000 hosts × 8 GPUs
// (fleetRows) that docs/performance.md holds it to. Version 1 of the
// schema wrote 49.7 MB for the same fleet. Each GPU's "health", even a
// healthy one's ({"state":"ok","findings":[]}, 39 bytes), added 3.1 MB
// to the 32.7 MB before it.
const statusBudget10k = 37_000_000

// status.json of 10,000 hosts × 8 GPUs stays within its budget, and
// complete: every host, GPU and process of the fleet is in it.
func TestStatusSizeBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 hosts: not with -short")
	}
	const hosts, gpus = 10000, 8
	rows := fleetRows(hosts, gpus)
	procs := 0
	for _, r := range rows {
		if r.PID.Valid {
			procs++
		}
	}
	var b bytes.Buffer
	if err := writeJSON(&b, testReport(t, rows, "")); err != nil {
		t.Fatal(err)
	}
	if b.Len() > statusBudget10k {
		t.Errorf("status.json of %d hosts × %d GPUs is %d bytes, over its budget of %d", hosts, gpus, b.Len(), statusBudget10k)
	}
	t.Logf("%d bytes, %d under the budget", b.Len(), statusBudget10k-b.Len())
	var st status
	if err := json.Unmarshal(b.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	gotGPUs, gotProcs := 0, 0
	for _, h := range st.Hosts {
		gotGPUs += len(h.GPUs)
		for _, g := range h.GPUs {
			gotProcs += len(g.Processes)
		}
	}
	if len(st.Hosts) != hosts || gotGPUs != hosts*gpus || gotProcs != procs {
		t.Errorf("status.json has %d hosts, %d GPUs, %d processes; want %d, %d, %d",
			len(st.Hosts), gotGPUs, gotProcs, hosts, hosts*gpus, procs)
	}
}

// leanRows is one up host with a busy GPU 0 (one process) and a free GPU
// 1, of the same model: nothing in it has a value for the keys status.json
// leaves out when empty.
func leanRows() []loaddata.Row {
	ts := "2026-11-23T14:05:00Z"
	gpu := func(i int64) loaddata.Row {
		return loaddata.Row{Timestamp: ts, Host: "gpu01", HostStatus: hoststatus.OK, GPUIndex: loaddata.IntOf(i),
			GPUUUID: "GPU-" + strconv.FormatInt(i, 10), GPUName: "NVIDIA H100 80GB HBM3", GPUBusID: "00000000:1" + strconv.FormatInt(i, 10) + ":00.0",
			MemUsedMiB: loaddata.Num(3), MemTotalMiB: loaddata.Num(81559), GPUUtilPct: loaddata.Num(0)}
	}
	busy := gpu(0)
	busy.MemUsedMiB, busy.GPUUtilPct = loaddata.Num(40000), loaddata.Num(98)
	busy.PID, busy.User, busy.Command, busy.ProcessMemMiB = loaddata.IntOf(4101), "alice", "python train.py", loaddata.Num(39990)
	return []loaddata.Row{busy, gpu(1)}
}

// leanKeys are the keys status.json leaves out when empty, by where they
// are: on a host, a GPU or a process.
var leanKeys = map[string][]string{
	"host":    {"error", "reservation", "gpu_name", "gpu_short_name", "gpu_vendor", "down_since", "last_known_gpus"},
	"gpu":     {"name", "short_name", "vendor", "notes", "error", "reservation", "unreserved_users", "processes"},
	"process": {"preemptible", "ignored", "slurm_job", "slurm_job_name", "slurm_partition", "container", "container_name", "pod"},
}

// statusValues is every value key has in status.json's objects of kind
// (host, gpu or process), in the file's order; nil when no object has it.
func statusValues(t *testing.T, js []byte, kind, key string) []any {
	t.Helper()
	var st struct {
		Hosts []map[string]any `json:"hosts"`
	}
	if err := json.Unmarshal(js, &st); err != nil {
		t.Fatalf("%v\n%s", err, js)
	}
	var out []any
	add := func(obj any) {
		if v, ok := obj.(map[string]any)[key]; ok {
			out = append(out, v)
		}
	}
	for _, h := range st.Hosts {
		if kind == "host" {
			add(h)
			continue
		}
		gpus, _ := h["gpus"].([]any)
		for _, g := range gpus {
			if kind == "gpu" {
				add(g)
				continue
			}
			procs, _ := g.(map[string]any)["processes"].([]any)
			for _, p := range procs {
				add(p)
			}
		}
	}
	return out
}

// A key left out when empty is there, with its value, as soon as it has
// one; the GPUs' model is on their host while they all agree and on each
// GPU when they do not (a lost GPU's "" included). Without values (the
// first case) none of them is there, only the host's model.
func TestStatusOmittedKeysReappear(t *testing.T) {
	dir := t.TempDir()
	resv := func(js string) string {
		path := filepath.Join(dir, strconv.Itoa(len(js))+".json")
		if err := os.WriteFile(path, []byte(js), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	down := func(host, why string) func([]loaddata.Row) []loaddata.Row {
		return func(r []loaddata.Row) []loaddata.Row {
			return append(r, loaddata.Row{Timestamp: r[0].Timestamp, Host: host, HostStatus: hoststatus.Timeout, HostError: why})
		}
	}
	h100 := []any{"NVIDIA H100 80GB HBM3"}
	tests := []struct {
		name string
		edit func(rows []loaddata.Row) []loaddata.Row
		resv string // reservations.json
		// the lean keys' values, as "kind.key"; the others are left out,
		// but for the host's model
		want map[string][]any
	}{
		{name: "none"},
		{name: "slurm job", edit: func(r []loaddata.Row) []loaddata.Row { r[0].SlurmJob = "1233_5"; return r },
			want: map[string][]any{"process.slurm_job": {"1233_5"}}},
		{name: "slurm job name", edit: func(r []loaddata.Row) []loaddata.Row { r[0].SlurmJobName = "llama-7b"; return r },
			want: map[string][]any{"process.slurm_job_name": {"llama-7b"}}},
		{name: "slurm partition", edit: func(r []loaddata.Row) []loaddata.Row { r[0].SlurmPartition = "gpu"; return r },
			want: map[string][]any{"process.slurm_partition": {"gpu"}}},
		{name: "container", edit: func(r []loaddata.Row) []loaddata.Row { r[0].Container = "3f2a9c1e4b7d"; return r },
			want: map[string][]any{"process.container": {"3f2a9c1e4b7d"}}},
		{name: "container name", edit: func(r []loaddata.Row) []loaddata.Row { r[0].ContainerName = "vllm-server"; return r },
			want: map[string][]any{"process.container_name": {"vllm-server"}}},
		{name: "pod", edit: func(r []loaddata.Row) []loaddata.Row { r[0].Pod = "6a3f0a43-5b7e-4c1e-9a8d-2f1e0c9b7a11"; return r },
			want: map[string][]any{"process.pod": {"6a3f0a43-5b7e-4c1e-9a8d-2f1e0c9b7a11"}}},
		{name: "preemptible", edit: func(r []loaddata.Row) []loaddata.Row { r[0].Preemptible = true; return r },
			want: map[string][]any{"process.preemptible": {true}, "gpu.notes": {[]any{"idle-time job running"}}}},
		{name: "ignored", edit: func(r []loaddata.Row) []loaddata.Row {
			r[0].Command, r[0].User, r[0].ProcessMemMiB, r[0].MemUsedMiB = "/usr/lib/xorg/Xorg vt1", "root", loaddata.Num(400), loaddata.Num(400)
			return r
		}, want: map[string][]any{"process.ignored": {true}}},
		{name: "GPU notes", edit: func(r []loaddata.Row) []loaddata.Row { r[1].MemUsedMiB = loaddata.Num(2048); return r },
			want: map[string][]any{"gpu.notes": {[]any{"memory in use but no process visible (another container?)"}}}},
		{name: "lost GPU", edit: func(r []loaddata.Row) []loaddata.Row {
			return append(r, loaddata.Row{Timestamp: r[0].Timestamp, Host: "gpu01", HostStatus: hoststatus.OK, GPUBusID: "0000:9a:00.0", GPUError: "GPU is lost"})
		}, want: map[string][]any{"gpu.error": {"GPU is lost"}, "host.gpu_name": nil, "host.gpu_short_name": nil,
			"gpu.name": {h100[0], h100[0], ""}, "gpu.short_name": {"H100 80GB HBM3", "H100 80GB HBM3", ""}}},
		{name: "mixed models", edit: func(r []loaddata.Row) []loaddata.Row { r[1].GPUName = "NVIDIA A100-SXM4-80GB"; return r },
			want: map[string][]any{"host.gpu_name": nil, "host.gpu_short_name": nil,
				"gpu.name": {h100[0], "NVIDIA A100-SXM4-80GB"}, "gpu.short_name": {"H100 80GB HBM3", "A100-SXM4-80GB"}}},
		{name: "both vendors", edit: func(r []loaddata.Row) []loaddata.Row {
			r[1].GPUName, r[1].GPUVendor = "AMD Instinct MI300X", loaddata.VendorAMD
			return r
		}, want: map[string][]any{"host.gpu_name": nil, "host.gpu_short_name": nil, "host.gpu_vendor": nil,
			"gpu.name": {h100[0], "AMD Instinct MI300X"}, "gpu.short_name": {"H100 80GB HBM3", "MI300X"}, "gpu.vendor": {"nvidia", "amd"}}},
		{name: "GPU reservation", resv: `{"gpu01": [{"name": "carol", "comment": "ICML", "gpus": [1]}]}`,
			want: map[string][]any{"gpu.reservation": {map[string]any{"name": "carol", "comment": "ICML", "until": nil}}}},
		{name: "GPU reservation used by another", resv: `{"gpu01": [{"name": "carol", "gpus": [0]}]}`,
			want: map[string][]any{"gpu.reservation": {map[string]any{"name": "carol", "comment": "", "until": nil}},
				"gpu.unreserved_users": {[]any{"alice"}}}},
		{name: "GPU reservation used by its owner", resv: `{"gpu01": [{"name": "alice", "gpus": [0]}]}`,
			want: map[string][]any{"gpu.reservation": {map[string]any{"name": "alice", "comment": "", "until": nil}}}},
		{name: "host down", edit: down("gpu02", "no complete answer in 20s"),
			want: map[string][]any{"host.error": {"no complete answer in 20s"}}},
		{name: "host reservation", edit: down("gpu03", "no route to host"), resv: `{"gpu03": [{"name": "frank"}]}`,
			want: map[string][]any{"host.error": {"no route to host"}, "host.reservation": {map[string]any{"name": "frank", "comment": "", "until": nil}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows := leanRows()
			if tt.edit != nil {
				rows = tt.edit(rows)
			}
			file := ""
			if tt.resv != "" {
				file = resv(tt.resv)
			}
			var js bytes.Buffer
			if err := writeJSON(&js, testReport(t, rows, file)); err != nil {
				t.Fatal(err)
			}
			want := map[string][]any{"host.gpu_name": h100, "host.gpu_short_name": {"H100 80GB HBM3"}, "host.gpu_vendor": {"nvidia"}}
			for k, v := range tt.want {
				want[k] = v
			}
			for kind, keys := range leanKeys {
				for _, key := range keys {
					if kind == "gpu" && key == "processes" {
						continue // the busy GPU's: every other test reads them
					}
					got := statusValues(t, js.Bytes(), kind, key)
					if diff := cmp.Diff(want[kind+"."+key], got); diff != "" {
						t.Errorf("%s %s (-want +got):\n%s", kind, key, diff)
					}
				}
			}
			if got := statusValues(t, js.Bytes(), "gpu", "processes"); len(got) != 1 {
				t.Errorf("%d GPUs with processes, want the busy one alone (a free GPU leaves the key out)", len(got))
			}
		})
	}
}

// jsonText is s as encoding/json writes it and reads it back: each byte
// of invalid UTF-8 becomes U+FFFD.
func jsonText(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		b.WriteRune(r) // RuneError for a bad byte, with n == 1
		s = s[n:]
	}
	return b.String()
}

// FuzzStatusJSON: whatever string a host sends, in every field it fills
// (markupRows), status.json is valid JSON, streamed as encoding/json
// writes it whole, and each of a process's six attribution keys is there
// exactly when it has a value, which reads back as sent (invalid UTF-8
// as U+FFFD).
func FuzzStatusJSON(f *testing.F) {
	for _, s := range []string{"", "x", `<"&'>`, "</script>", "\x00\x1b[31m", "\xff\xfe", "\u2028\u2029", `\"}]},{`, "é\u202e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rep := testReport(t, markupRows(s), "")
		var got, want bytes.Buffer
		if err := writeJSON(&got, rep); err != nil {
			t.Fatal(err)
		}
		if !json.Valid(got.Bytes()) {
			t.Fatalf("status.json is not valid JSON for %q:\n%s", s, got.String())
		}
		if err := json.NewEncoder(&want).Encode(statusOf(rep)); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Fatalf("streamed status.json differs for %q:\n%s", s, cmp.Diff(want.String(), got.String()))
		}
		// pid 1 has s in all six
		var first map[string]any
		for _, p := range statusProcesses(t, got.Bytes()) {
			if p["pid"] == 1.0 {
				first = p
			}
		}
		if first == nil {
			t.Fatalf("no process 1 in\n%s", got.String())
		}
		for _, key := range leanKeys["process"][2:] {
			v, ok := first[key]
			if s == "" && ok {
				t.Errorf("%s: %q, want it left out", key, v)
			}
			if want := jsonText(s); s != "" && v != want {
				t.Errorf("%s: %q (present: %v), want %q", key, v, ok, want)
			}
		}
	})
}

// BenchmarkStatusJSON writes status.json alone, from classified data, for
// 1,000 and 10,000 hosts × 8 GPUs (fleetRows: no Slurm jobs or
// containers; -attributed: attributedFleetRows, whose processes have
// them), with its size.
func BenchmarkStatusJSON(b *testing.B) {
	for _, hosts := range []int{1000, 10000} {
		for _, attrib := range []bool{false, true} {
			name := strconv.Itoa(hosts)
			if attrib {
				name += "-attributed"
			}
			b.Run(name, func(b *testing.B) {
				rep := testReport(b, fleetRowsWith(hosts, 8, attrib), "")
				var buf bytes.Buffer
				for b.Loop() {
					buf.Reset()
					if err := writeJSON(&buf, rep); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(buf.Len()), "json-bytes")
				b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/json")
			})
		}
	}
}

// statusProcesses are status.json's processes, every key as it is there.
func statusProcesses(t *testing.T, statusJSON []byte) []map[string]any {
	t.Helper()
	var st struct {
		Hosts []struct {
			GPUs []struct {
				Processes []map[string]any `json:"processes"`
			} `json:"gpus"`
		} `json:"hosts"`
	}
	if err := json.Unmarshal(statusJSON, &st); err != nil {
		t.Fatal(err)
	}
	var procs []map[string]any
	for _, h := range st.Hosts {
		for _, g := range h.GPUs {
			procs = append(procs, g.Processes...)
		}
	}
	return procs
}
