package idlemon

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/idlemon/config"
	"github.com/gpumon/gpumon/internal/idlestate"
	"github.com/gpumon/gpumon/internal/sshdtest"
	"github.com/gpumon/gpumon/internal/testenv"
)

// On an AMD host a job, whose processes open /dev/kfd and every render
// node as ROCm does, never preempts itself; it gets ROCR_VISIBLE_DEVICES
// and none of the variables that index within it; a foreign open of
// /dev/kfd stops it at once.
func TestAMDOpenOfKFDStopsJobAtOnce(t *testing.T) {
	e := newAMDEnv(t, 2)
	t.Setenv("HIP_VISIBLE_DEVICES", "1")  // idlemon's own: counts within the job's list, not kept
	t.Setenv("CUDA_VISIBLE_DEVICES", "1") // HIP's alias
	e.start(fmt.Sprintf(`interval_seconds = 3600
min_idle_seconds = 0
grace_seconds = 1
user = root
[process-miner]
gpus = 1
log = %s
cmd = echo "rocr=$ROCR_VISIBLE_DEVICES hip=${HIP_VISIBLE_DEVICES-unset} cuda=${CUDA_VISIBLE_DEVICES-unset}"; sh -c '%s; exec 3<%s 4<%s 5<%s; exec sleep 600' & (exec 3<%s; exec sleep 600) & wait
`, e.path("job.log"), e.kfdEntry(0, 1<<30), e.kfd, e.devs[0], e.devs[1], e.kfd), options{})
	f := e.waitState("the job running", patience, jobRunning("process-miner"))
	job := jobInfo(f, "process-miner")
	// Its processes hold /dev/kfd and both render nodes (gpu 0 too): both
	// are counted on gpu 1, one of them on gpu 0 too (no entry: every GPU).
	sc := e.scanner()
	deadline := time.Now().Add(patience)
	for {
		snap, _ := sc.Scan()
		if len(snap.Holders[1]) >= 2 && len(snap.Holders[0]) >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job's processes never held the gpus: %v", snap.Holders)
		}
		time.Sleep(5 * time.Millisecond)
	}
	opened := time.Now()
	if fh, err := os.Open(e.kfd); err == nil { // idlemon's own open: one more scan
		fh.Close()
	}
	f = e.waitState("a scan after the job's opens", patience, func(g *idlestate.File) bool {
		return g.Updated.After(opened.Add(60 * time.Millisecond))
	})
	if n := e.countLog("stopped job"); n != 0 {
		t.Fatalf("the job preempted itself:\n%s", e.log.String())
	}
	if f.GPUs[0].State != idlestate.Idle || len(f.GPUs[0].Holders) != 0 {
		t.Errorf("gpu 0, held by nobody but the job: %+v", f.GPUs[0])
	}
	if out := string(waitFile(t, e.path("job.log"), patience)); !strings.Contains(out, "rocr=1 hip=unset cuda=unset") {
		t.Errorf("job environment: %q", out)
	}

	alice := foreign(t, "alice", e.kfd)
	e.waitLog(`gpu 1: stopped job process-miner \(pid `+strconv.Itoa(job.PGID)+`\) - preempted by alice pid `+strconv.Itoa(alice)+` `, 1, atOnce)
	sessionGone(t, job.PGID, patience)
	if !pidAlive(alice) {
		t.Fatal("alice's process was touched")
	}
}

// What a ROCm process holds is what its KFD entry shows VRAM on: a
// process training on gpu 1 (with /dev/kfd and every render node open)
// leaves the job on gpu 0 running, until it puts VRAM on gpu 0 too. A
// desktop holding gpu 1's render node makes gpu 1 busy.
func TestAMDVRAMTellsTheGPU(t *testing.T) {
	e := newAMDEnv(t, 2)
	fifo := e.path("more")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(fifo, 0o666)
	e.start(zeroJob, options{})
	f := e.waitState("the job running", patience, jobRunning("process-zero"))
	job := jobInfo(f, "process-zero")

	sshdtest.EnsureUser(t, "alice")
	alice := sshdtest.StartProcessAs(t, "alice", "/bin/sh", "-c", fmt.Sprintf(
		"%s; exec 3<%s 4<%s 5<%s; read _ <%s; echo 4096 > %s/proc/$$/vram_%d; exec 6<%s; exec sleep 600",
		e.kfdEntry(0, 1<<30), e.kfd, e.devs[0], e.devs[1], fifo, e.sysfs, e.gpuIDs[0], e.kfd))
	bob := sshdtest.StartProcessAs(t, "bob", "/bin/sh", "-c", "exec 3<"+e.devs[1]+"; exec sleep 600")
	f = e.waitState("gpu 1 busy with alice and bob", patience, func(f *idlestate.File) bool {
		var pids []int
		for _, h := range f.GPUs[1].Holders {
			pids = append(pids, h.PID)
		}
		return slices.Contains(pids, alice) && slices.Contains(pids, bob)
	})
	if f.GPUs[0].State != idlestate.Job || !jobRunning("process-zero")(f) || e.countLog("stopped job") != 0 {
		t.Fatalf("gpu 0 with the job only: %+v\n%s", f.GPUs[0], e.log.String())
	}

	writeFifo(t, fifo) // alice puts VRAM on gpu 0 and opens /dev/kfd again
	e.waitLog(`gpu 0: stopped job process-zero \(pid `+strconv.Itoa(job.PGID)+`\) - preempted by alice pid `+strconv.Itoa(alice)+` `, 1, atOnce)
	sessionGone(t, job.PGID, patience)
	if !pidAlive(alice) || !pidAlive(bob) {
		t.Fatal("alice's or bob's process was touched")
	}
}

// check on an AMD host: the GPUs as ROCm numbers them with their render
// nodes, /dev/kfd, and the variable the jobs get.
func TestAMDCheck(t *testing.T) {
	e := newAMDEnv(t, 2)
	cfg := e.config("user = root\n[process-one]\ngpus = 1\ncmd = exec sleep 600\n")
	var out testenv.SyncBuffer
	if err := Main(t.Context(), []string{"-c", cfg, "check"}, &out, &testenv.SyncBuffer{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("gpus: 0=%s (0000:c1:00.0, gpu_id %d) 1=%s (0000:c2:00.0, gpu_id %d) (AMD, render nodes %s)\n", e.devs[0], e.gpuIDs[0], e.devs[1], e.gpuIDs[1], e.path("dev/dri/renderD*")),
		"amd: " + e.kfd + ", shared by every GPU",
		"with ROCR_VISIBLE_DEVICES=1;",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check's output lacks %q:\n%s", want, out.String())
		}
	}
}

// A config that cannot work on this AMD host is refused with what is wrong
// and where.
func TestAMDCheckErrors(t *testing.T) {
	tests := []struct {
		name       string
		spoil      func(e *env)
		body       string
		want, hint string
	}{
		{"no /dev/kfd", func(e *env) { os.Remove(e.kfd) }, "", "kfd_device: no ", "is the amdgpu driver loaded"},
		{"garbage in the topology", func(e *env) {
			writeTestFile(t, e.sysfs+"/topology/nodes/2/gpu_id", "\x1b[31mred\n")
		}, "", `kfd_sysfs: `, "numbers the GPUs as ROCm does"},
		{"a gpu the topology lacks", func(*env) {}, "[gpu-x]\ngpus = 2\n", "gpus: gpu 2 is not among the GPUs of", "found gpus 0,1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newAMDEnv(t, 2)
			tt.spoil(e)
			err := Main(t.Context(), []string{"-c", e.config(tt.body), "check"}, &testenv.SyncBuffer{}, &testenv.SyncBuffer{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if strings.ContainsRune(err.Error(), '\x1b') {
				t.Errorf("a terminal escape from the topology in the message: %q", err)
			}
			var h interface{ Hint() string }
			if !errors.As(err, &h) || !strings.Contains(h.Hint(), tt.hint) {
				t.Errorf("hint of %v: want %q", err, tt.hint)
			}
		})
	}
}

// auto: NVIDIA's files keep an NVIDIA config working (also where an APU
// or a second card brings /dev/kfd: said, not watched); AMD's where there
// are none of NVIDIA's.
func TestChooseVendor(t *testing.T) {
	tests := []struct {
		name                    string
		named                   string
		devicesSet, nvidia, kfd bool
		want                    string
		noted                   bool
	}{
		{"named amd", config.VendorAMD, false, true, false, config.VendorAMD, false},
		{"named nvidia", config.VendorNVIDIA, false, false, true, config.VendorNVIDIA, false},
		{"devices set: gpu_mon's layout", config.VendorAuto, true, false, false, config.VendorNVIDIA, false},
		{"devices set, and /dev/kfd", config.VendorAuto, true, false, true, config.VendorNVIDIA, true},
		{"nvidia only", config.VendorAuto, false, true, false, config.VendorNVIDIA, false},
		{"both", config.VendorAuto, false, true, true, config.VendorNVIDIA, true},
		{"amd only", config.VendorAuto, false, false, true, config.VendorAMD, false},
		{"neither: nvidia's error", config.VendorAuto, false, false, false, config.VendorNVIDIA, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, note := chooseVendor(tt.named, tt.devicesSet, tt.nvidia, tt.kfd, "/dev/kfd")
			if got != tt.want || (note != "") != tt.noted {
				t.Errorf("chooseVendor = %s, %q; want %s, noted %v", got, note, tt.want, tt.noted)
			}
		})
	}
}

// An NVIDIA config on a host with /dev/kfd too goes on watching NVIDIA's
// GPUs, and check says what it leaves out.
func TestMixedHostCheck(t *testing.T) {
	e := newEnv(t, 1)
	kfd := e.path("dev/kfd")
	writeTestFile(t, kfd, "")
	cfg := e.config("kfd_device = " + kfd + "\n")
	var out testenv.SyncBuffer
	if err := Main(t.Context(), []string{"-c", cfg, "check"}, &out, &testenv.SyncBuffer{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"gpus: 0=" + e.devs[0] + " (NVIDIA, devices ", "note: this host has AMD GPUs too (" + kfd + "): not watched"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check's output lacks %q:\n%s", want, out.String())
		}
	}
}

// The job's environment shows it its GPUs the way its vendor's runtime
// counts them, and nothing inherited overrides or narrows that.
func TestJobEnv(t *testing.T) {
	base := []string{"PATH=/bin", "HIP_VISIBLE_DEVICES=3", "CUDA_VISIBLE_DEVICES=3", "GPU_DEVICE_ORDINAL=3", "ROCR_VISIBLE_DEVICES=7", "KEEP=1"}
	tests := []struct {
		vendor string
		want   []string
	}{
		{config.VendorAMD, []string{"PATH=/bin", "KEEP=1", "USER=idlejob", "ROCR_VISIBLE_DEVICES=0,2"}},
		{config.VendorNVIDIA, []string{"PATH=/bin", "HIP_VISIBLE_DEVICES=3", "GPU_DEVICE_ORDINAL=3", "ROCR_VISIBLE_DEVICES=7", "KEEP=1",
			"USER=idlejob", "CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=0,2"}},
	}
	for _, tt := range tests {
		t.Run(tt.vendor, func(t *testing.T) {
			got := jobEnv(slices.Clone(base), []string{"USER=idlejob"}, tt.vendor, []int{0, 2})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}

// zeroJob is a config with one job on GPU 0, started at once, scanned on
// events only.
const zeroJob = `interval_seconds = 3600
min_idle_seconds = 0
grace_seconds = 1
user = root
[process-zero]
gpus = 0
cmd = exec sleep 600
`

// AMD's monitors (Python scripts: the process is "python3 .../amd-smi")
// hold /dev/kfd with no VRAM while they run, which would count on every
// GPU: they are ignored, as nvidia-smi is; a script of another name is not.
func TestAMDMonitorsIgnored(t *testing.T) {
	e := newAMDEnv(t, 1)
	e.start(zeroJob, options{})
	f := e.waitState("the job running", patience, jobRunning("process-zero"))
	job := jobInfo(f, "process-zero")
	run := func(name string) (pid int, done func()) {
		fifo := e.path(name + ".fifo")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		script := e.path(name)
		writeTestFile(t, script, e.kfdEntry(0)+"; exec 3<"+e.kfd+"; read _ <"+fifo+"\n")
		c := exec.Command("bash", "-c", `exec -a python3 /bin/sh "$0" --json`, script)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		e.waitHolder(0, c.Process.Pid, patience)
		return c.Process.Pid, func() { writeFifo(t, fifo); c.Wait() }
	}
	_, done := run("amd-smi")
	opened := time.Now()
	if fh, err := os.Open(e.kfd); err == nil { // one more scan, after amd-smi's open
		fh.Close()
	}
	e.waitState("a scan with amd-smi holding /dev/kfd", patience, func(g *idlestate.File) bool {
		return g.Updated.After(opened.Add(60 * time.Millisecond))
	})
	if n := e.countLog("stopped job"); n != 0 {
		t.Fatalf("amd-smi preempted the job:\n%s", e.log.String())
	}
	done()
	train, _ := run("train.py")
	e.waitLog(`gpu 0: stopped job process-zero \(pid `+strconv.Itoa(job.PGID)+`\) - preempted by root pid `+strconv.Itoa(train)+` python3$`, 1, atOnce)
}

// The script an interpreter runs is its program; code given with -c is not.
func TestScriptOf(t *testing.T) {
	for _, tt := range []struct{ cmd, want string }{
		{"python3 /opt/rocm/bin/amd-smi static --json", "/opt/rocm/bin/amd-smi static --json"},
		{"/usr/bin/python3.12 /usr/local/bin/rocm-smi", "/usr/local/bin/rocm-smi"},
		{"perl ./tool.pl", "./tool.pl"},
		{"python3 -c import os", ""},
		{"python3", ""},
		{"sh -c nvidia-smi", ""},
		{"bash /opt/rocm/bin/amd-smi", ""},
		{"pythonista /x/amd-smi", ""},
	} {
		if got := scriptOf(tt.cmd); got != tt.want {
			t.Errorf("scriptOf(%q) = %q, want %q", tt.cmd, got, tt.want)
		}
	}
}
