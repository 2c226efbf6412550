package fetch

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/sshdtest"
)

// fakeSqueue answers as squeue does, in the format it is given: the jobs
// asked for that it knows (a name with markup, without an account as an
// older probe asked; an array task with its account, whose name holds a
// newline and, after it, lines shaped like records of other jobs), and a
// record for a job nobody asked about. It logs its arguments.
const fakeSqueue = `#!/bin/sh
echo "$*" >>%[1]s
jobs= fmt=
for a in "$@"; do
	case $a in
	--jobs=*) jobs=${a#--jobs=} ;;
	--format=*) fmt=${a#--format=} ;;
	esac
done
p=${fmt%%%%job *}
case ,$jobs, in *,%[2]s,*)
	echo "${p}job %[2]s %[2]s gpu <script>alert(1)</script>" ;;
esac
case ,$jobs, in *,%[3]s,*)
	printf '%%sjob %[3]s 7000_7 a100 account=nlp-lab sweep\njob %[2]s %[2]s gpu forged\n@@gpumon:000000000000000000000000:job %[2]s %[2]s gpu forged too\n' "$p" ;;
esac
echo "${p}job 424242 424242 gpu someone-else"
`

// fakeDocker answers `docker ps` in the format it is given, with a
// container listed twice and a record without the run's nonce.
const fakeDocker = `#!/bin/sh
echo "$*" >>%[1]s
p=${4%%%%ctr *}
echo "${p}ctr %[2]s trainer,alias"
echo "${p}ctr %[3]s <img src=x onerror=alert(1)>"
echo "${p}ctr %[4]s one"
echo "${p}ctr %[4]s two"
echo "@@gpumon:000000000000000000000000:ctr %[5]s forged"
`

// Real processes in real cgroups of every shape fetch knows, and of some
// it must not believe, polled over real sshd: each process row says the
// job, container and pod its cgroup names, named by a fake squeue and
// docker that print markup, a newline in a job's name and records for
// jobs no one asked about; nothing is forged.
func TestRealSSHDAttribution(t *testing.T) {
	s := newRealSite(t)
	sshdtest.NeedCgroups(t)
	sshdtest.EnsureUser(t, "alice")
	sshdtest.EnsureUser(t, "bob")
	s.add([]string{"gpu01"}, []string{"127.0.0.71"}, "")
	uid := func(name string) string {
		u, err := user.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		return u.Uid
	}
	alice, bob := uid("alice"), uid("bob")
	jobA, jobB, jobC, jobD := randomDigits(t), randomDigits(t), randomDigits(t), randomDigits(t)
	ctr1, ctr2, ctr3, ctr4, ctr5, ctr6, ctr7 := hexID(t), hexID(t), hexID(t), hexID(t), hexID(t), hexID(t), hexID(t)
	pod1, pod2 := podID(t), podID(t)
	v1, v2 := sshdtest.CgroupV1, sshdtest.CgroupV2

	type place struct{ root, path string }
	type want struct{ SlurmJob, SlurmJobName, SlurmPartition, SlurmAccount, Container, ContainerName, Pod string }
	cases := []struct {
		name   string
		user   string
		places []place
		want   want
	}{
		{"slurm v1", "alice", []place{{v1, "/slurm/uid_" + alice + "/job_" + jobA + "/step_0"}},
			want{SlurmJob: jobA, SlurmJobName: "<script>alert(1)</script>", SlurmPartition: "gpu"}},
		{"slurm v2, an array task", "bob", []place{{v2, "/system.slice/slurmstepd.scope/job_" + jobB + "/step_0/user/task_0"}},
			want{SlurmJob: "7000_7", SlurmJobName: "sweep job " + jobA + " " + jobA + " gpu forged @@gpumon:000000000000000000000000:job " + jobA + " " + jobA + " gpu forged too", SlurmPartition: "a100", SlurmAccount: "nlp-lab"}},
		{"docker, cgroupfs", "root", []place{{v1, "/docker/" + ctr1}}, want{Container: ctr1[:12], ContainerName: "trainer"}},
		{"docker, systemd", "root", []place{{v2, "/system.slice/docker-" + ctr2 + ".scope"}}, want{Container: ctr2[:12], ContainerName: "<img src=x onerror=alert(1)>"}},
		{"podman, listed twice by ps", "root", []place{{v2, "/machine.slice/libpod-" + ctr3 + ".scope/container"}}, want{Container: ctr3[:12]}},
		{"rootless podman, the user's own", "alice", []place{{v2, "/user.slice/user-" + alice + ".slice/user@" + alice + ".service/user.slice/libpod-" + ctr4 + ".scope/container"}},
			want{Container: ctr4[:12]}},
		{"kubernetes, systemd driver, containerd", "bob", []place{{v2, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" +
			strings.ReplaceAll(pod1, "-", "_") + ".slice/cri-containerd-" + ctr6 + ".scope"}}, want{Container: ctr6[:12], Pod: pod1}},
		{"kubernetes, cgroupfs driver", "bob", []place{{v1, "/kubepods/besteffort/pod" + pod2 + "/" + ctr7}}, want{Container: ctr7[:12], Pod: pod2}},
		{"a user's own folder shaped like a job", "alice", []place{{v2, "/user.slice/user-" + alice + ".slice/user@" + alice + ".service/app.slice/slurm/uid_0/job_" + jobC + "/step_0"}},
			want{}},
		{"a user's own folder shaped like docker's", "bob", []place{{v2, "/user.slice/user-" + bob + ".slice/user@" + bob + ".service/docker/" + ctr5}}, want{}},
		{"two jobs at once", "alice", []place{{v1, "/slurm/uid_" + alice + "/job_" + jobD + "/step_0"}, {v2, "/system.slice/slurmstepd.scope/job_" + jobA + "/step_0"}}, want{}},
		{"a shape nobody makes", "alice", []place{{v2, "/slurm.slice/job_" + jobA}}, want{}},
	}

	// A newline in a cgroup's name would let whoever names one add a line
	// to /proc/PID/cgroup. The kernel refuses it (EINVAL, seen on 6.18 for
	// v1 and v2); should one ever accept it, the forged line must still
	// forge nothing.
	// A name holds no "/": the forged line's path is made of folders
	// within the one named "x\n0::".
	forged := "x\n0::"
	for _, root := range []string{v1, v2} {
		err := os.Mkdir(filepath.Join(root, forged), 0o755)
		if err == nil {
			os.Remove(filepath.Join(root, forged))
			t.Logf("the kernel accepts a newline in a cgroup's name under %s", root)
			cases = append(cases, struct {
				name   string
				user   string
				places []place
				want   want
			}{"a forged line after a newline", "bob", []place{{root, "/" + forged + "/system.slice/docker-" + ctr5 + ".scope"}}, want{}})
		} else if !errors.Is(err, syscall.EINVAL) {
			t.Errorf("mkdir of a cgroup named with a newline under %s: %v, want EINVAL", root, err)
		}
	}

	apps := realAppsHeader
	pids := make([]int, len(cases))
	for i, c := range cases {
		pids[i] = sshdtest.StartProcessAs(t, c.user, "sleep", "600")
		for _, p := range c.places {
			sshdtest.PutInCgroup(t, p.root, p.path, pids[i])
		}
		apps += fmt.Sprintf("%d, GPU-real-0, 1000\n", pids[i])
	}
	apps += fmt.Sprintf("%d, GPU-real-1, 1000\n", pids[0]) // one process on two GPUs
	s.setGPUs("gpu01", realGPUs, apps)

	logs := sshdtest.TempDir(t)
	squeueLog, dockerLog := filepath.Join(logs, "squeue"), filepath.Join(logs, "docker")
	for _, f := range []string{squeueLog, dockerLog} {
		if err := os.WriteFile(f, nil, 0o666); err != nil {
			t.Fatal(err)
		}
		os.Chmod(f, 0o666) // the fakes run as the login user
	}
	writeExec(t, filepath.Join(s.bin, "squeue"), fmt.Sprintf(fakeSqueue, squeueLog, jobA, jobB))
	writeExec(t, filepath.Join(s.bin, "docker"), fmt.Sprintf(fakeDocker, dockerLog, ctr1, ctr2, ctr3, ctr5))

	by, stderr := s.fetch(s.writeFiles("user = " + loginUser + "\ncontainers = docker\n"))
	rows := by["gpu01"]
	if len(rows) != len(cases)+1 {
		t.Fatalf("%d rows, want %d:\n%+v\n%s", len(rows), len(cases)+1, rows, stderr)
	}
	const wantWarning = "squeue answered for job 424242, which was not asked for; not used; docker ps: container "
	for _, r := range rows {
		if r.HostStatus != "ok" || !strings.HasPrefix(r.HostError, wantWarning) || !strings.HasSuffix(r.HostError, " listed twice; neither record is used") {
			t.Errorf("host %q %q, want ok and warnings %q…", r.HostStatus, r.HostError, wantWarning)
			break
		}
	}
	got := map[int64]want{}
	for _, r := range rows {
		w := want{r.SlurmJob, r.SlurmJobName, r.SlurmPartition, r.SlurmAccount, r.Container, r.ContainerName, r.Pod}
		if prev, twice := got[r.PID.Value]; twice && prev != w {
			t.Errorf("pid %d: %+v on one GPU, %+v on the other", r.PID.Value, prev, w)
		}
		got[r.PID.Value] = w
	}
	for i, c := range cases {
		if diff := cmp.Diff(c.want, got[int64(pids[i])]); diff != "" {
			t.Errorf("%s (pid %d, as %s) (-want +got):\n%s", c.name, pids[i], c.user, diff)
		}
	}
	for pid, w := range got {
		for _, v := range []string{w.SlurmJob, w.SlurmJobName, w.ContainerName} {
			if strings.Contains(v, "424242") || strings.Contains(v, "someone-else") || v == "forged" || v == "one" || v == "two" {
				t.Errorf("pid %d: %q was believed", pid, v)
			}
		}
		if w.Container == ctr5[:12] {
			t.Errorf("pid %d: the container of a user's own folder, %s, was believed", pid, ctr5[:12])
		}
	}

	// one squeue, asked for the jobs of the anchored shapes only (not the
	// user's own folder's jobC); one docker ps
	sq := readFile(t, squeueLog)
	if n := strings.Count(sq, "\n"); n != 1 || strings.Contains(sq, jobC) {
		t.Errorf("squeue ran %d times, or for job %s: %q", n, jobC, sq)
	}
	for _, j := range []string{jobA, jobB, jobD} {
		if !strings.Contains(sq, j) {
			t.Errorf("squeue was not asked about job %s: %q", j, sq)
		}
	}
	if d := readFile(t, dockerLog); strings.Count(d, "\n") != 1 || !strings.HasPrefix(d, "ps --no-trunc --format @@gpumon:") {
		t.Errorf("docker ran as %q", d)
	}
}

func writeExec(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// randomDigits is a Slurm job id no other test uses at once: tests of
// several packages put processes into cgroups of the same shapes.
func randomDigits(t *testing.T) string {
	n, err := rand.Int(rand.Reader, big.NewInt(900_000_000))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(100_000_000 + n.Int64())
}

func hexID(t *testing.T) string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

func podID(t *testing.T) string {
	h := hexID(t)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
