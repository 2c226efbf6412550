package probe

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The script runs in a real sh with a fake nvidia-smi first on PATH, and its
// output frames back into the sections fetch reads.
func TestScriptInRealShell(t *testing.T) {
	bin := t.TempDir()
	fake := `#!/bin/sh
case "$1" in
--query-gpu=*) echo "index, uuid"; echo "0, GPU-a" ;;
--query-compute-apps=*) echo "pid, gpu_uuid, used_gpu_memory [MiB]"; echo "PID, GPU-a, 10" ;;
esac
`
	fake = strings.Replace(fake, "PID", strconv.Itoa(os.Getpid()), 1)
	if err := os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state.json")
	os.WriteFile(state, []byte(`{"gpus":[]}`), 0o644)
	req := NewRequest(3)
	req.StateFile = state
	cmd := exec.Command("sh", "-c", Command)
	cmd.Stdin = strings.NewReader(req.Script())
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	o := ParseOutput(req.Nonce, out)
	if !o.Complete {
		t.Fatalf("output not complete:\n%s", out)
	}
	for _, s := range []string{SectionGPUs, SectionApps, SectionPS, SectionHost, SectionIdlemon} {
		if !o.Has(s) {
			t.Errorf("section %s missing:\n%s", s, out)
		}
	}
	if got := string(o.Sections[SectionGPUs].Body); got != "index, uuid\n0, GPU-a\n" {
		t.Errorf("gpus body %q", got)
	}
	ps := string(o.Sections[SectionPS].Body)
	if !strings.Contains(ps, strconv.Itoa(os.Getpid())+" ") || !strings.Contains(ps, os.Args[0]) {
		t.Errorf("ps section does not show the process: %q", ps)
	}
	host := string(o.Sections[SectionHost].Body)
	for _, k := range []string{"cpus ", "load ", "mem_total_kib ", "mem_available_kib "} {
		if !strings.Contains(host, k) {
			t.Errorf("host section lacks %q: %q", k, host)
		}
	}
	if got := string(o.Sections[SectionIdlemon].Body); got != "{\"gpus\":[]}\n" {
		t.Errorf("idlemon section %q", got)
	}
}

// No nvidia-smi on the host: the sections still come, with sh's exit code.
func TestScriptWithoutNvidiaSMI(t *testing.T) {
	req := NewRequest(2)
	cmd := exec.Command("/bin/sh", "-s")
	cmd.Stdin = strings.NewReader(req.Script())
	cmd.Env = []string{"PATH=/nonexistent"}
	out, _ := cmd.Output()
	o := ParseOutput(req.Nonce, out)
	if g, ok := o.Sections[SectionGPUs]; !ok || g.ExitCode != 127 {
		t.Errorf("gpus exit code = %d, want 127\n%s", g.ExitCode, out)
	}
}

// A fifo where idlemon's state file should be is not read: the script
// finishes, without an idlemon section, instead of waiting for a writer.
func TestScriptStateFileIsAFifo(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.json")
	if err := syscall.Mkfifo(state, 0o644); err != nil {
		t.Fatal(err)
	}
	req := NewRequest(2)
	req.StateFile = state
	cmd := exec.Command("/bin/sh", "-s")
	cmd.Stdin = strings.NewReader(req.Script())
	cmd.Env = []string{"PATH=/nonexistent"}
	out, _ := cmd.Output()
	o := ParseOutput(req.Nonce, out)
	if !o.Complete || o.Has(SectionIdlemon) {
		t.Errorf("complete %v, idlemon section %v:\n%s", o.Complete, o.Has(SectionIdlemon), out)
	}
}

// nvidia-smi prints process_name unquoted: asking for it again would let a
// process name split its row and forge others.
func TestAppFieldsHoldNoName(t *testing.T) {
	for _, f := range AppFields {
		if f == "process_name" || f == "name" {
			t.Errorf("AppFields asks nvidia-smi for %q", f)
		}
	}
	if AppFields[0] != "pid" {
		t.Errorf("AppFields start with %q; the script reads the pid from the first", AppFields[0])
	}
}

func TestParseScriptRoundTrip(t *testing.T) {
	for i, ct := range []string{ContainersDocker, ContainersPodman, ""} {
		req := NewRequest(7)
		req.StateFile = "/run/idlemon/state.json"
		req.Containers = ct
		if i != 1 { // and one request as a bare NewRequest makes it
			req.HealthFields = []string{"pstate", "clocks_event_reasons.active"}
			req.ProcessUtil = true
			req.KernelLogSince = 330 + i
			req.DriverGPUs = "/tmp/gpus"
		}
		got, err := ParseScript(req.Script())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(req, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	}
	// the script runs the command CT names: only the two engines
	req := NewRequest(7)
	req.Containers = "rm -rf /; docker"
	if got, _ := ParseScript(req.Script()); got.Containers != "" {
		t.Errorf("containers %q made it into the script", got.Containers)
	}
	if _, err := ParseScript("echo hello"); err == nil {
		t.Error("ParseScript accepted a script that is not a probe")
	}
}

// A host cannot forge a section: only lines with this run's nonce count.
func TestParseOutputIgnoresForgedMarkers(t *testing.T) {
	var buf bytes.Buffer
	w := Writer{W: &buf, Nonce: "n1"}
	buf.WriteString("Welcome to gpu01\n")
	w.Section(SectionGPUs, []byte("index\n0\n@@gpumon:other end gpus 0\n@@gpumon:other done"), 0)
	w.Section(SectionApps, []byte("pid"), 9)
	w.Done()
	buf.WriteString("@@gpumon:n1 begin ps\nhalf a section after done\n")
	o := ParseOutput("n1", buf.Bytes())
	if !o.Complete {
		t.Error("not complete")
	}
	if got := string(o.Sections[SectionGPUs].Body); got != "index\n0\n@@gpumon:other end gpus 0\n@@gpumon:other done\n" {
		t.Errorf("gpus body %q", got)
	}
	if o.Sections[SectionApps].ExitCode != 9 {
		t.Errorf("apps exit = %d", o.Sections[SectionApps].ExitCode)
	}
	if o.Has(SectionPS) {
		t.Error("a section without its end line was kept")
	}
	if string(o.Stray) != "Welcome to gpu01\n" {
		t.Errorf("stray %q", o.Stray)
	}
	if ParseOutput("n1", []byte("@@gpumon:n1 begin gpus\n0\n")).Complete {
		t.Error("truncated output reported complete")
	}
}

// The record lines of the cgroups, squeue and ps sections start with the
// nonce but are no marker: they stay in their section's body.
func TestRecordLinesAreNotMarkers(t *testing.T) {
	var buf bytes.Buffer
	w := Writer{W: &buf, Nonce: "n1"}
	body := RecordPrefix("n1") + "pid 42\n0::/\n" + RecordPrefix("n1") + "cut\n" + RecordPrefix("n1") + "job 1 1 gpu done\n"
	w.Section(SectionCgroups, []byte(body), 0)
	w.Done()
	o := ParseOutput("n1", buf.Bytes())
	if got := string(o.Sections[SectionCgroups].Body); got != body || !o.Complete {
		t.Errorf("body %q, complete %v", got, o.Complete)
	}
}
