package supervisor

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"
	"syscall"

	"github.com/gpumon/gpumon/internal/holders"
	"golang.org/x/sys/unix"
)

// maxEnviron bounds what is read of one process's environment. The kernel
// caps argv+envp at a quarter of the stack limit (2 MiB by default); a
// mark beyond this bound is not seen, and its process is not taken for
// the job's.
const maxEnviron = 4 << 20

// A Member is one live process of a job, as read from /proc.
type Member struct {
	PID   int
	PPID  int
	Start uint64 // clock ticks after boot: tells a reused pid apart
	PGID  int
	SID   int
	UID   int // real uid
	Mark  Mark
	Comm  string
	// NoEnv: the jobs' user's process showed no environment at all. A
	// process in the middle of execve shows none for a moment (its new
	// memory has no environment yet), and neither does one started with
	// env -i.
	NoEnv bool
}

// A target says which processes make up a job: those carrying Mark (any
// run of this instance when Nonce is empty), and those in session SID
// while its leader, pid SID started at SIDStart, is still there (alive or
// a zombie): then the session is the job's, for a session id is not
// reused while its leader's pid is taken. Once the leader is gone the
// pid may be another process's, the leader of another session: only the
// mark counts then. Only the jobs' user's processes ever qualify.
type target struct {
	Mark     Mark // Instance "": no mark; Nonce "": every run of Instance
	SID      int  // 0: no session
	SIDStart uint64
	Procs    map[int]uint64 // pid -> start time: known to be the job's (seen with its mark)
}

// now is t as it stands: without its session once the leader is gone.
func (s *Supervisor) now(t target) target {
	if t.SID > 1 {
		if p, err := holders.ReadProc(s.proc(), t.SID); err != nil || p.Start != t.SIDStart || t.SIDStart == 0 {
			t.SID = 0
		}
	}
	return t
}

func (t target) owns(m Member) bool {
	if t.Mark.Instance != "" && m.Mark.Instance == t.Mark.Instance && (t.Mark.Nonce == "" || m.Mark.Nonce == t.Mark.Nonce) {
		return true
	}
	if st, ok := t.Procs[m.PID]; ok && st == m.Start {
		return true
	}
	return t.SID > 1 && m.SID == t.SID && m.Start >= t.SIDStart
}

func (s *Supervisor) proc() string {
	if s.Proc == "" {
		return "/proc"
	}
	return s.Proc
}

// read reads pid's identity; an error when it is gone, a zombie, or not
// readable.
func (s *Supervisor) read(pid int, environ bool) (Member, error) {
	base := s.proc() + "/" + strconv.Itoa(pid)
	p, err := holders.ReadProc(s.proc(), pid)
	if err != nil {
		return Member{}, err
	}
	if p.State == 'Z' || p.State == 'X' {
		return Member{}, errGone
	}
	m := Member{PID: pid, PPID: p.PPID, Start: p.Start, PGID: p.PGID, SID: p.SID, Comm: p.Comm}
	status, err := os.ReadFile(base + "/status")
	if err != nil {
		return Member{}, err
	}
	uid, ok := realUID(status)
	if !ok {
		return Member{}, errors.New("no Uid line in " + base + "/status")
	}
	m.UID = uid
	if environ && uid == s.UID {
		b, err := readBounded(base+"/environ", maxEnviron)
		if err == nil {
			m.Mark, _ = markIn(b)
		}
		m.NoEnv = len(b) == 0
	}
	return m, nil
}

var errGone = errors.New("process gone")

// realUID reads the first number of the Uid: line of /proc/PID/status.
func realUID(status []byte) (int, bool) {
	i := bytes.Index(status, []byte("\nUid:"))
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(status[i+5:])
	if len(f) == 0 {
		return 0, false
	}
	n, err := strconv.Atoi(string(f[0]))
	return n, err == nil
}

func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max))
}

// find lists the live processes of t, of the jobs' user only.
func (s *Supervisor) find(t target) []Member {
	t = s.now(t)
	d, err := os.Open(s.proc())
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	self := os.Getpid()
	var out []Member
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 1 || pid == self {
			continue
		}
		m, err := s.read(pid, true)
		if err != nil || m.UID != s.UID {
			continue
		}
		if t.owns(m) {
			out = append(out, m)
		}
	}
	return out
}

// signalPID sends sig to pid if it is, now, one of the jobs' user's
// processes and t's. The check and the signal go through one pidfd, so a
// pid reused in between cannot be hit. It returns what it found and
// whether the signal was sent.
func (s *Supervisor) signalPID(pid int, t target, sig syscall.Signal) (Member, bool) {
	if pid <= 1 || pid == os.Getpid() {
		return Member{}, false
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	havePidfd := err == nil
	if err != nil && !errors.Is(err, unix.ENOSYS) {
		return Member{}, false // gone
	}
	if havePidfd {
		defer unix.Close(pidfd)
	}
	m, err := s.read(pid, true)
	if err != nil || m.UID != s.UID || !s.now(t).owns(m) {
		return m, false
	}
	if havePidfd {
		return m, unix.PidfdSendSignal(pidfd, sig, nil, 0) == nil
	}
	return m, syscall.Kill(pid, sig) == nil // kernels before 5.3
}
