package render

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// sharedGPUAt is a load_data.csv at m minutes after 14:05 with one GPU
// shared by alice, whose notebook does nothing (0 % SM), and bob, who
// trains (85 %): the GPU is at 88 %.
func sharedGPUAt(t testing.TB, dir string, m int) string {
	t.Helper()
	ts := time.Date(2026, 11, 23, 14, 5, 0, 0, time.UTC).Add(time.Duration(m) * time.Minute).Format(time.RFC3339)
	const head = "timestamp,host,host_status,host_error,gpu_index,gpu_uuid,gpu_name,gpu_bus_id,gpu_error,gpu_util_pct,mem_util_pct,mem_used_mib,mem_total_mib,temperature_c,power_w,power_limit_w,fan_pct,pid,user,command,process_mem_mib,process_elapsed_s,preemptible,process_sm_pct,cpus,load1,host_mem_used_mib,host_mem_total_mib\n"
	row := func(pid int, user, command string, mem, sm int) string {
		return fmt.Sprintf("%s,gpu03,ok,,2,GPU-gpu03-2,NVIDIA H100 80GB HBM3,00000000:3B:00.0,,88,40,61000,81559,60,500,700,,%d,%s,%s,%d,93784,,%d,64,3.5,120000,515000\n",
			ts, pid, user, command, mem, sm)
	}
	data := head + row(4101, "alice", "jupyter-lab", 30000, 0) + row(4202, "bob", "python train.py", 31000, 85)
	path := filepath.Join(dir, fmt.Sprintf("load_data-%03d.csv", m))
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// On a shared GPU the idle-held list names the idle holder (alice), with
// her own memory, never the holder who works on it (bob); the GPU counts
// once.
func TestIdleHeldSharedGPU(t *testing.T) {
	dir := t.TempDir()
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[render]\nhtml = index.html\nprom = metrics.prom\n[history]\nidle_after = 20m\n"), 0o644)
	for m := 0; m <= 30; m += 5 {
		if _, stderr, err := renderMain(t, "-c", ini, "-i", sharedGPUAt(t, dir, m)); err != nil {
			t.Fatalf("render at minute %d: %v\n%s", m, err, stderr)
		}
	}
	var st status
	data, _ := os.ReadFile(filepath.Join(dir, "status.json"))
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	want := []statusIdleHeldGPU{{Host: "gpu03", GPU: "2", Users: []string{"alice"}, Since: "2026-11-23T14:05:00Z", Hours: 0.5, MemUsedMiB: 30000}}
	if diff := cmp.Diff(want, st.IdleHeld); diff != "" {
		t.Errorf("status.json's idle_held (-want +got):\n%s", diff)
	}
	page, _ := os.ReadFile(filepath.Join(dir, "index.html"))
	_, table, _ := strings.Cut(string(page), "<table id=idleheld>")
	table, _, _ = strings.Cut(table, "</table>")
	if !strings.Contains(table, "<td>alice<td>") || strings.Contains(table, "bob") {
		t.Errorf("the page's idle-held table names alice alone? %s", table)
	}
	prom, _ := os.ReadFile(filepath.Join(dir, "metrics.prom"))
	for _, line := range []string{
		"gpumon_idle_held_gpus 1",
		`gpumon_gpu_idle_held_by_user_seconds{host="gpu03",gpu="2",user="alice"} 1800`,
	} {
		if !strings.Contains(string(prom), line+"\n") {
			t.Errorf("metrics.prom lacks %s", line)
		}
	}
	if strings.Contains(string(prom), `idle_held_by_user_seconds{host="gpu03",gpu="2",user="bob"}`) {
		t.Error("metrics.prom has bob idle-held")
	}
}
