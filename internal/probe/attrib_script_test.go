package probe_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/attrib"
	"github.com/gpumon/gpumon/internal/probe"
	"github.com/gpumon/gpumon/internal/sshdtest"
)

// The script in a real sh, for processes in real cgroups: each process's
// cgroup text once (one of them is on two GPUs, one is gone: exit 0 all
// the same), ONE squeue for the job ids in them (not for a job named by a
// folder of a user's own), ONE docker ps, and none where nothing asks for
// it.
func TestScriptAttributionInRealShell(t *testing.T) {
	sshdtest.NeedCgroups(t)
	job, user := randomJob(t), randomJob(t)
	ctr := randomID(t)
	inJob := sshdtest.StartProcessAs(t, "root", "sleep", "600")
	inCtr := sshdtest.StartProcessAs(t, "root", "sleep", "601")
	inOwn := sshdtest.StartProcessAs(t, "root", "sleep", "602")
	const gone = 999_999_999 // above any pid_max: ended before the script looked
	sshdtest.PutInCgroup(t, sshdtest.CgroupV2, fmt.Sprintf("/system.slice/slurmstepd.scope/job_%s/step_0", job), inJob)
	sshdtest.PutInCgroup(t, sshdtest.CgroupV1, "/docker/"+ctr, inCtr)
	sshdtest.PutInCgroup(t, sshdtest.CgroupV2, fmt.Sprintf("/user.slice/user-0.slice/user@0.service/app.slice/slurm/uid_0/job_%s/step_0", user), inOwn)

	bin := t.TempDir()
	calls := filepath.Join(t.TempDir(), "calls")
	writeScript(t, bin, "nvidia-smi", fmt.Sprintf(`case "$1" in
--query-gpu=*) echo "index, uuid"; echo "0, GPU-a"; echo "1, GPU-b" ;;
--query-compute-apps=*) echo "pid, gpu_uuid, used_gpu_memory [MiB]"; echo "%d, GPU-a, 10"; echo "%d, GPU-a, 10"; echo "%d, GPU-b, 10"; echo "%d, GPU-b, 10"; echo "%d, GPU-b, 10" ;;
esac`, inJob, inCtr, inJob, inOwn, gone))
	// squeue fills in each field of the format it is given, as the real one
	writeScript(t, bin, "squeue", fmt.Sprintf(`echo "squeue $*" >>%s
fmt=; for a in "$@"; do case $a in --format=*) fmt=${a#--format=} ;; esac; done
printf '%%s\n' "$fmt" | sed -e 's/%%A/%s/' -e 's/%%i/%s_3/' -e 's/%%P/gpu/' -e 's/%%a/vision-lab/' -e 's/%%j/sweep/'`, calls, job, job))
	writeScript(t, bin, "docker", fmt.Sprintf(`echo "docker $*" >>%s
p=${4%%%%ctr *}
echo "${p}ctr %s trainer"`, calls, ctr))

	for _, ct := range []string{probe.ContainersDocker, ""} {
		t.Run("containers="+ct, func(t *testing.T) {
			os.Remove(calls)
			req := probe.NewRequest(5)
			req.Containers = ct
			o := runScript(t, req, bin)
			for _, s := range []string{probe.SectionCgroups, probe.SectionSqueue} {
				if sec := o.Sections[s]; !o.Has(s) || sec.ExitCode != 0 {
					t.Errorf("section %s: present %v, exit %d", s, o.Has(s), sec.ExitCode)
				}
			}
			prefix := probe.RecordPrefix(req.Nonce)
			cg := attrib.ParseCgroups(o.Sections[probe.SectionCgroups].Body, prefix)
			want := map[int]attrib.Cgroup{inJob: {SlurmJob: job}, inCtr: {ContainerID: ctr}, inOwn: {}, gone: {}}
			if diff := cmp.Diff(want, cg); diff != "" {
				t.Errorf("cgroups (-want +got):\n%s\n%s", diff, o.Sections[probe.SectionCgroups].Body)
			}
			if n := strings.Count(string(o.Sections[probe.SectionCgroups].Body), prefix+"pid "); n != 4 {
				t.Errorf("%d pid records, want 4 (one a process)", n)
			}
			jobs, _ := attrib.ParseSqueue(o.Sections[probe.SectionSqueue].Body, prefix, map[string]bool{job: true})
			if got := jobs[job]; got != (attrib.Job{ID: job + "_3", Partition: "gpu", Account: "vision-lab", Name: "sweep"}) {
				t.Errorf("squeue: %+v\n%s", jobs, o.Sections[probe.SectionSqueue].Body)
			}
			wantCalls := []string{fmt.Sprintf("squeue --noheader --jobs=%s --format=%sjob %%A %%i %%P account=%%a %%j", job, prefix)}
			if ct == probe.ContainersDocker {
				wantCalls = append(wantCalls, fmt.Sprintf("docker ps --no-trunc --format %sctr {{.ID}} {{.Names}}", prefix))
				names, _ := attrib.ParseContainers(o.Sections[probe.SectionDocker].Body, prefix)
				if diff := cmp.Diff(map[string]string{ctr: "trainer"}, names); diff != "" {
					t.Errorf("docker ps (-want +got):\n%s", diff)
				}
			} else if o.Has(probe.SectionDocker) {
				t.Errorf("docker ps ran without containers = docker")
			}
			if diff := cmp.Diff(wantCalls, readLines(t, calls)); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
		})
	}
}

// A squeue that prints without end, and a /proc/PID/cgroup longer than a
// process's share: the host still answers in full, the sections say what
// went wrong.
func TestScriptAttributionBounds(t *testing.T) {
	sshdtest.NeedCgroups(t)
	job := randomJob(t)
	pid := sshdtest.StartProcessAs(t, "root", "sleep", "600")
	// a path is at most 4,095 bytes with the mount point's: two of
	// 2,500 make a text longer than the 4,096 bytes read of a process
	long := fmt.Sprintf("/system.slice/slurmstepd.scope/job_%s/step_0", job)
	for i := 0; i < 10; i++ {
		long += "/" + strings.Repeat(string(rune('a'+i)), 250)
	}
	sshdtest.PutInCgroup(t, sshdtest.CgroupV1, long, pid)
	sshdtest.PutInCgroup(t, sshdtest.CgroupV2, long, pid)
	other := sshdtest.StartProcessAs(t, "root", "sleep", "601")
	sshdtest.PutInCgroup(t, sshdtest.CgroupV2, fmt.Sprintf("/system.slice/slurmstepd.scope/job_%s/step_1", job), other)

	bin := t.TempDir()
	writeScript(t, bin, "nvidia-smi", fmt.Sprintf(`case "$1" in
--query-gpu=*) echo "index, uuid"; echo "0, GPU-a" ;;
--query-compute-apps=*) echo "pid, gpu_uuid, used_gpu_memory [MiB]"; echo "%d, GPU-a, 10"; echo "%d, GPU-a, 10" ;;
esac`, pid, other))
	writeScript(t, bin, "squeue", "exec yes")
	req := probe.NewRequest(5)
	o := runScript(t, req, bin)
	if !o.Complete || !o.Has(probe.SectionHost) {
		t.Fatalf("complete %v, host section %v", o.Complete, o.Has(probe.SectionHost))
	}
	sq := o.Sections[probe.SectionSqueue]
	if want := fmt.Sprintf("gpumon probe: squeue printed more than %d bytes (cut off on the host)\n", probe.MaxSqueueOutput); sq.ExitCode != 3 || string(sq.Body) != want {
		t.Errorf("squeue section: exit %d, %q", sq.ExitCode, sq.Body)
	}
	body := o.Sections[probe.SectionCgroups].Body
	if !strings.Contains(string(body), probe.RecordPrefix(req.Nonce)+"cut\n") {
		t.Errorf("the long text was not cut:\n%.300s", body)
	}
	cg := attrib.ParseCgroups(body, probe.RecordPrefix(req.Nonce))
	if diff := cmp.Diff(map[int]attrib.Cgroup{pid: {}, other: {SlurmJob: job}}, cg); diff != "" {
		t.Errorf("a cgroup text longer than 4096 bytes (-want +got):\n%s", diff)
	}
}

func runScript(t *testing.T, req probe.Request, bin string) probe.Output {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", probe.Command)
	cmd.Stdin = strings.NewReader(req.Script())
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	o := probe.ParseOutput(req.Nonce, out)
	if !o.Complete {
		t.Fatalf("output not complete:\n%s", out)
	}
	return o
}

func writeScript(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// randomJob is a job id no other test uses at once: tests of several
// packages put processes into cgroups of the same shapes in parallel.
func randomJob(t *testing.T) string {
	n, err := rand.Int(rand.Reader, big.NewInt(900_000_000))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(100_000_000 + n.Int64())
}

func randomID(t *testing.T) string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}
