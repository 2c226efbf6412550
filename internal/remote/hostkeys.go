package remote

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"
	xknownhosts "golang.org/x/crypto/ssh/knownhosts"
)

// HostKeys checks host keys against known_hosts files. There is no mode that
// skips the check: accept-new records a host seen for the first time, exactly
// as OpenSSH's StrictHostKeyChecking=accept-new does, and still refuses a
// changed key.
//
// The files are read once and looked at again (a stat each, no read) at most
// once every recheckEvery: a process that runs for days (fetch's live mode)
// sees a key the admin added, or removed, without a restart, and a fleet
// of 10,000 hosts costs a few stats per round, not a read per host.
type HostKeys struct {
	acceptNew bool
	now       func() time.Time // nil: time.Now

	mu  sync.Mutex
	dbs map[string]*knownDB // by the joined file list
}

// recheckEvery is how often HostKeys looks whether its known_hosts files
// changed.
const recheckEvery = time.Second

type knownDB struct {
	files   []string
	ix      *knownIndex
	err     error
	added   map[string]ssh.PublicKey // accepted by this process, by normalized address
	stamps  []fileStamp              // the files as they were when read
	checked time.Time                // when stamps were last compared with the files
}

// fileStamp is what tells that a file changed without reading it: an
// editor that writes a new file and renames it changes the inode, one
// that writes in place the size or the modification time.
type fileStamp struct {
	exists   bool
	size     int64
	modified int64 // UnixNano
	dev, ino uint64
	err      string // why it could not be looked at
}

func stampOf(file string) fileStamp {
	fi, err := os.Stat(file)
	if errors.Is(err, os.ErrNotExist) {
		return fileStamp{}
	}
	if err != nil {
		return fileStamp{err: err.Error()}
	}
	st := fileStamp{exists: true, size: fi.Size(), modified: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.dev, st.ino = uint64(sys.Dev), sys.Ino
	}
	return st
}

func stampsOf(files []string) []fileStamp {
	out := make([]fileStamp, len(files))
	for i, f := range files {
		out[i] = stampOf(f)
	}
	return out
}

// NewHostKeys returns a checker; acceptNew records unknown hosts in the first
// known_hosts file of each target.
func NewHostKeys(acceptNew bool) *HostKeys {
	return &HostKeys{acceptNew: acceptNew, dbs: map[string]*knownDB{}}
}

// HostKeyError is an unknown host or a changed key, with what was offered.
type HostKeyError struct {
	Address     string // as looked up in known_hosts
	Changed     bool
	Offered     ssh.PublicKey
	KnownAt     []string // file:line of the keys on record, when Changed
	Files       []string
	AcceptNewOK bool // the fix for an unknown host is accept-new
	// Alias and Indirect say how the host was asked for: a host behind a
	// ProxyJump or ProxyCommand, or under a HostKeyAlias, is out of
	// ssh-keyscan's reach, and ssh (which follows ~/.ssh/config) records it.
	Alias    string
	Indirect bool
}

func (e *HostKeyError) Error() string {
	fp := e.Offered.Type() + " " + ssh.FingerprintSHA256(e.Offered)
	if e.Changed {
		return fmt.Sprintf("HOST KEY CHANGED for %s: it offered %s, known_hosts has another key (%s); if the change is expected, run: ssh-keygen -R '%s'",
			e.Address, fp, strings.Join(e.KnownAt, ", "), e.Address)
	}
	file := "~/.ssh/known_hosts"
	if len(e.Files) > 0 {
		file = e.Files[0]
	}
	add := keyscanCommand(e.Address) + " >> " + file
	if e.Indirect && e.Alias != "" {
		add = "ssh -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile=" + file + " " + e.Alias + " true"
	}
	return fmt.Sprintf("host key for %s is not in %s (it offered %s); check the fingerprint, then add it: %s (or set strict_host_key_checking = accept-new)",
		e.Address, strings.Join(e.Files, " or "), fp, add)
}

// keyscanCommand is the ssh-keyscan line that records the key under the name
// fetch looks up: ssh-keyscan knows nothing of ~/.ssh/config, so it needs the
// real address and, off port 22, -p (it then writes "[host]:port" itself).
func keyscanCommand(address string) string {
	if rest, ok := strings.CutPrefix(address, "["); ok {
		if host, port, ok := strings.Cut(rest, "]:"); ok {
			return fmt.Sprintf("ssh-keyscan -p %s %s", port, host)
		}
	}
	return "ssh-keyscan " + address
}

func (hk *HostKeys) clock() time.Time {
	if hk.now != nil {
		return hk.now()
	}
	return time.Now()
}

// load returns files read: as last read, when they have not changed since
// or were looked at less than recheckEvery ago; read again otherwise.
func (hk *HostKeys) load(files []string) *knownDB {
	key := strings.Join(files, "\x00")
	hk.mu.Lock()
	defer hk.mu.Unlock()
	now := hk.clock()
	old, ok := hk.dbs[key]
	if ok && now.Sub(old.checked) < recheckEvery && !now.Before(old.checked) {
		return old
	}
	stamps := stampsOf(files)
	if ok {
		old.checked = now
		if old.err == nil && slices.Equal(stamps, old.stamps) {
			return old
		}
	}
	d := &knownDB{files: files, added: map[string]ssh.PublicKey{}, stamps: stamps, checked: now}
	if ok {
		// a key this process recorded stays the one it holds the host to,
		// whatever became of the line it wrote (shared: a callback made
		// before this reload may still record one)
		d.added = old.added
	}
	var existing []string
	for i, f := range files {
		if stamps[i].err != "" {
			_, d.err = os.Stat(f)
		} else if stamps[i].exists {
			existing = append(existing, f)
		}
	}
	if d.err == nil {
		d.ix, d.err = loadKnownIndex(existing)
	}
	hk.dbs[key] = d
	return d
}

// Config returns the host-key callback and the algorithms to ask for, for a
// host looked up as address ("host:port") in files.
func (hk *HostKeys) Config(address string, files []string) (ssh.HostKeyCallback, []string, error) {
	d := hk.load(files)
	if d.err != nil {
		return nil, nil, fmt.Errorf("known_hosts: %v", d.err)
	}
	// Ask only for key types on record: a server with RSA, ECDSA and Ed25519
	// keys would otherwise offer one we do not hold and look "changed".
	algos := d.ix.algorithms(address)
	cb := func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := d.ix.check(address, remote, key)
		if err == nil {
			return nil
		}
		if knownhosts.IsHostKeyChanged(err) {
			e := &HostKeyError{Address: knownhosts.Normalize(address), Changed: true, Offered: key, Files: files}
			e.KnownAt = keyErrorWant(err)
			return e
		}
		if knownhosts.IsHostUnknown(err) {
			return hk.unknown(d, address, remote, key)
		}
		return err
	}
	return cb, algos, nil
}

// unknown records the key under accept-new, or refuses it.
func (hk *HostKeys) unknown(d *knownDB, address string, remote net.Addr, key ssh.PublicKey) error {
	norm := knownhosts.Normalize(address)
	e := &HostKeyError{Address: norm, Offered: key, Files: d.files, AcceptNewOK: true}
	if !hk.acceptNew || len(d.files) == 0 {
		return e
	}
	hk.mu.Lock()
	defer hk.mu.Unlock()
	if prev, ok := d.added[norm]; ok {
		if string(prev.Marshal()) == string(key.Marshal()) {
			return nil
		}
		e.Changed = true
		e.KnownAt = []string{d.files[0] + " (added by this run)"}
		return e
	}
	if !recordable(norm, address) {
		return fmt.Errorf("accept-new: will not record the host key of %q: a known_hosts line for that name would mean other hosts (or none); add it by hand", norm)
	}
	if err := appendKnownHost(d.files[0], norm, key); err != nil {
		return fmt.Errorf("accept-new: cannot record the host key of %s: %v", norm, err)
	}
	d.added[norm] = key
	return nil
}

// recordable says whether name, written as a known_hosts host pattern,
// names address and no other host: no blanks or line ends (another field,
// another line), no comma (a list), no * or ? (a wildcard), no leading !,
// |, @ or # (a negation, a hashed name, a marker, a comment), and read back
// as knownhosts reads it, address's host and port (a name in brackets that
// does not parse would make knownhosts refuse the whole file).
func recordable(name, address string) bool {
	if name == "" || strings.ContainsAny(name, ",*?") || strings.ContainsAny(name[:1], "!|@#") {
		return false
	}
	host, port, err := net.SplitHostPort(name)
	if err != nil {
		if name[0] == '[' {
			return false
		}
		host, port = name, "22"
	}
	if h, p, err := net.SplitHostPort(address); err != nil || h != host || p != port {
		return false
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// appendKnownHost adds one line the way ssh does: created 0600 in a 0700
// folder if missing, appended with O_APPEND so concurrent writers interleave
// whole lines.
func appendKnownHost(file, address string, key ssh.PublicKey) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	line := knownhosts.Line([]string{address}, key) + "\n"
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// keyErrorWant lists file:line of the keys known_hosts holds for the host.
func keyErrorWant(err error) []string {
	var ke *xknownhosts.KeyError
	if !errors.As(err, &ke) {
		return nil
	}
	var out []string
	for _, w := range ke.Want {
		out = append(out, fmt.Sprintf("%s:%d", w.Filename, w.Line))
	}
	sort.Strings(out)
	return out
}
