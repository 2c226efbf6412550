package supervisor

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MarkVar is the environment variable that marks a job's processes. Its
// value is "INSTANCE/NONCE/JOB": INSTANCE names the idlemon (one per state
// file), NONCE one start of a job, JOB the config section.
const MarkVar = "IDLEMON_JOB"

// A Mark says which idlemon started a process, for which job, in which run.
// Every process of a job carries it: the environment is inherited through
// fork, setsid and exec, so a worker that daemonizes (tmux new -d,
// screen -dm, a double fork) keeps it.
type Mark struct {
	Instance string
	Nonce    string
	Job      string
}

func (m Mark) String() string { return m.Instance + "/" + m.Nonce + "/" + m.Job }

// Env is the mark as a NAME=value environment entry.
func (m Mark) Env() string { return MarkVar + "=" + m.String() }

// parseMark reads a mark's value; the job name may hold slashes.
func parseMark(v string) (Mark, bool) {
	inst, rest, ok1 := strings.Cut(v, "/")
	nonce, job, ok2 := strings.Cut(rest, "/")
	if !ok1 || !ok2 || inst == "" || nonce == "" || job == "" {
		return Mark{}, false
	}
	return Mark{Instance: inst, Nonce: nonce, Job: job}, true
}

// InstanceOf names the idlemon that writes stateFile: two idlemons on one
// host (with two state files) never take each other's jobs for their own.
func InstanceOf(stateFile string) string {
	sum := sha256.Sum256([]byte(stateFile))
	return hex.EncodeToString(sum[:6])
}

// newNonce is a fresh run's name: 64 random bits.
func newNonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail on Linux
	return hex.EncodeToString(b[:])
}

// markIn finds the mark in an environment block (NUL-separated NAME=value
// entries, as /proc/PID/environ holds it). The first entry wins, as it
// does for getenv(3).
func markIn(environ []byte) (Mark, bool) {
	prefix := []byte(MarkVar + "=")
	for len(environ) > 0 {
		entry := environ
		if i := bytes.IndexByte(environ, 0); i >= 0 {
			entry, environ = environ[:i], environ[i+1:]
		} else {
			environ = nil
		}
		if bytes.HasPrefix(entry, prefix) {
			return parseMark(string(entry[len(prefix):]))
		}
	}
	return Mark{}, false
}
