package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/gpumon/gpumon/internal/cgroup"
	"github.com/gpumon/gpumon/internal/holders"
	"golang.org/x/sys/unix"
)

// In cgroup mode (Supervisor.Tree set) every run of a job has a cgroup of
// its own, and a process is the job's when it is in that group: the
// kernel puts every process the job starts there, and only root can take
// one out (a move needs write access to the cgroup.procs of the common
// ancestor of both groups, which is root's). Sessions, process groups,
// titles and environments no longer matter, and SIGKILL at the end of a
// stop's grace goes to the whole group at once (cgroup.kill), forks in
// flight included.

// gate is the job's first program in cgroup mode where its group has v1
// folders (or the kernel is older than 5.7): it waits, holding nothing
// but its pipe, until idlemon has put it in every folder of its group
// (the cgroup v1 ones cannot be joined at birth), then becomes the job. If idlemon dies first, the pipe ends without a word and the job
// never runs.
const gate = `read -r go <&3 && [ "$go" = go ] || exit 111; exec 3<&-; exec /bin/sh -c "$0"`

// gateExit is the gate's exit status when idlemon never let it through.
const gateExit = 111

// startInGroup starts cmd (a /bin/sh -c of spec.Cmd, with its environment
// and files set) in a new group of s.Tree named after mark.
func (s *Supervisor) startInGroup(cmd *exec.Cmd, spec Spec, mark Mark) (*cgroup.Group, error) {
	g, err := s.Tree.Create(cgroup.GroupName(mark.Nonce, spec.Name), spec.Limits)
	if err != nil {
		return nil, err
	}
	// Born in its v2 group (clone3's CLONE_INTO_CGROUP, Linux 5.7): until
	// Add, another process of the jobs' user could ptrace the gate and
	// make it fork a child outside the group.
	dir := groupFD(g.Dir)
	if dir >= 0 {
		defer unix.Close(dir)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, dir
		if len(g.V1) == 0 {
			// in every folder of its group from birth (a pure-v2 host):
			// no gate, no second exec
			if err := cmd.Start(); err != nil {
				g.Remove()
				return nil, err
			}
			return g, nil
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		g.Remove()
		return nil, err
	}
	defer w.Close()
	cmd.Args = []string{"/bin/sh", "-c", gate, spec.Cmd}
	cmd.ExtraFiles = []*os.File{r}
	err = cmd.Start()
	r.Close()
	if err != nil {
		g.Remove()
		return nil, err
	}
	s.hook("gate")
	if err := g.Add(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill() // still at the gate: nothing else of the job exists
		_ = cmd.Wait()
		g.Kill()
		g.WaitEmpty(time.Now().Add(5 * time.Second))
		g.Remove()
		return nil, fmt.Errorf("cgroup %s: %v", g.Dir, err)
	}
	// A failed write means the gate has exited already: the job's end is
	// reported as any other.
	_, _ = w.Write([]byte("go\n"))
	return g, nil
}

// groupFD is a descriptor of the group folder dir for clone3's
// CLONE_INTO_CGROUP (Linux 5.7), or -1 where the kernel is older or the
// folder cannot be opened (Add alone then puts the gate in).
func groupFD(dir string) int {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return -1
	}
	var major, minor int
	fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor)
	if major < 5 || major == 5 && minor < 7 {
		return -1
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

// groupMembers lists g's processes now.
func (s *Supervisor) groupMembers(g *cgroup.Group) []Member {
	pids, _ := g.Procs()
	var out []Member
	for _, pid := range pids {
		if m, err := s.read(pid, false); err == nil {
			out = append(out, m)
		}
	}
	return out
}

// inGroup says whether pid is in g now.
func (s *Supervisor) inGroup(g *cgroup.Group, pid int) bool {
	ms, err := cgroup.ReadMembership(s.proc(), pid)
	if err != nil {
		return false
	}
	name, ok := s.Tree.GroupOf(ms)
	return ok && name == g.Name
}

// signalInGroup sends sig to pid if it is in g, through a pidfd opened
// before the check: a pid reused in between is not hit.
func (s *Supervisor) signalInGroup(g *cgroup.Group, pid int, sig syscall.Signal) bool {
	if pid <= 1 || pid == os.Getpid() {
		return false
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) && s.inGroup(g, pid) {
			return syscall.Kill(pid, sig) == nil // kernels before 5.3
		}
		return false
	}
	defer unix.Close(pidfd)
	if !s.inGroup(g, pid) {
		return false
	}
	return unix.PidfdSendSignal(pidfd, sig, nil, 0) == nil
}

// stopGroup stops every process of g: SIGTERM to the known ones (the
// GPU's holders, for a prompt preemption), then to every other one;
// SIGKILL to the group after grace (cgroup.kill, or frozen and one by
// one), until it is empty or 5 s more have passed. An empty group is
// removed.
func (s *Supervisor) stopGroup(g *cgroup.Group, grace time.Duration, known []Known) (killed bool, left []Member) {
	termed := map[int]bool{}
	for _, k := range known {
		if p, err := holders.ReadProc(s.proc(), k.PID); err == nil && p.Start == k.Start && s.signalInGroup(g, k.PID, syscall.SIGTERM) {
			termed[k.PID] = true
		}
	}
	s.hook("term-known")
	s.termAll(g, termed)
	if !g.WaitEmpty(time.Now().Add(grace)) {
		killed = true
		_ = g.Kill()
		s.hook("killed")
		if !g.WaitEmpty(time.Now().Add(5 * time.Second)) {
			return killed, s.groupMembers(g)
		}
	}
	if err := g.Remove(); err != nil {
		s.hook("remove-failed")
	}
	return killed, nil
}

// termAll sends SIGTERM once to every process of g not in termed: a
// sweep of cgroup.procs, again while the last one found new processes,
// three at most. The job runs meanwhile: a frozen process would act on
// its SIGTERM only once thawed, later for the GPU's user. One that forks
// faster than the sweeps gets SIGKILL with the rest at the end of the
// grace period. A group an earlier idlemon left frozen is thawed first.
func (s *Supervisor) termAll(g *cgroup.Group, termed map[int]bool) {
	_ = g.Thaw()
	for sweep := 0; sweep < 3; sweep++ {
		if s.termSweep(g, termed) == 0 {
			break
		}
	}
	s.hook("termed")
}

// termSweep sends SIGTERM to each process of g not in termed, and says
// how many it sent.
func (s *Supervisor) termSweep(g *cgroup.Group, termed map[int]bool) int {
	pids, _ := g.Procs()
	n := 0
	for _, pid := range pids {
		if !termed[pid] && s.signalInGroup(g, pid, syscall.SIGTERM) {
			termed[pid] = true
			n++
		}
	}
	return n
}

// hook is called at each step of a stop; a test's TestMain sets StopHook
// to kill idlemon at a chosen step.
func (s *Supervisor) hook(step string) {
	if StopHook != nil {
		StopHook(step)
	}
}

// StopHook, when set (by tests only), is called at each step of a
// cgroup stop: "term-known", "termed", "killed"; and at a start, "gate":
// the job's first process runs, not yet let through.
var StopHook func(step string)

// RunOf says which run of this idlemon's jobs pid belongs to in cgroup
// mode, by its group: the mark of that run (Instance, Nonce, Job), or
// false when pid is in no group of ours.
func (s *Supervisor) RunOf(pid int) (Mark, bool) {
	if s.Tree == nil {
		return Mark{}, false
	}
	ms, err := cgroup.ReadMembership(s.proc(), pid)
	if err != nil {
		return Mark{}, false
	}
	name, ok := s.Tree.GroupOf(ms)
	if !ok {
		return Mark{}, false
	}
	nonce, job, ok := cgroup.ParseGroupName(name)
	return Mark{Instance: s.Instance, Nonce: nonce, Job: job}, ok
}

// groupLeftovers lists the groups an earlier idlemon left in the tree,
// with their processes; empty ones are removed at once.
func (s *Supervisor) groupLeftovers() []*Leftover {
	gs, err := s.Tree.Groups()
	if err != nil {
		return nil
	}
	var out []*Leftover
	for _, g := range gs {
		_, job, _ := cgroup.ParseGroupName(g.Name)
		l := &Leftover{Job: job, group: g, Members: s.groupMembers(g)}
		if len(l.Members) == 0 {
			if populated, err := g.Populated(); err == nil && !populated {
				_ = g.Thaw()
				_ = g.Remove()
				continue
			}
		}
		out = append(out, l)
	}
	return out
}
