package render

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/gpumon/gpumon/internal/accounting"
	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/reservations"
)

// The privacy settings ([render] commands and users) act on a copy of the
// report, made once before any published file is written, so that every
// file (page, group pages, page-state.json, status.json, metrics.prom,
// index.txt, free.txt) shows the same, and none is left out by a writer
// that forgot. The history, the notifications and -text keep the real
// names: they are the lab's own, not published.

// DefaultPseudonymKey is the key file's name beside the CSV.
const DefaultPseudonymKey = "pseudonym.key"

// pseudonymKeySize is the key's length in bytes: an HMAC-SHA256 key.
const pseudonymKeySize = 32

// privacy is what [render] commands and users make of a report's text.
type privacy struct {
	commands string // CommandsShow, CommandsProgram or CommandsHide
	key      []byte // nil: user names are shown
	// names are the real user names to hide, each with its pseudonym;
	// scrub finds them inside free text (commands, job and container
	// names, reservation comments).
	names map[string]string
	scrub *nameFinder
	// done holds each text already made: a command line is on each GPU
	// its process uses, a job's name on each of its processes
	done map[string]string
}

// privacyOf is cfg's privacy, nil when everything is shown. With users
// hidden it reads the pseudonym key, making it on first use.
func privacyOf(cfg *Config) (*privacy, error) {
	if cfg.showsAll() {
		return nil, nil
	}
	p := &privacy{commands: cfg.Commands, names: map[string]string{}, done: map[string]string{}}
	if cfg.Users == UsersHide {
		key, err := pseudonymKey(cfg)
		if err != nil {
			return nil, err
		}
		p.key = key
	}
	return p, nil
}

// showsAll reports whether the published files show every command and
// user name ("" is a Config made without DefaultConfig: shown).
func (c *Config) showsAll() bool {
	return (c.Commands == "" || c.Commands == CommandsShow) && (c.Users == "" || c.Users == UsersShow)
}

// pseudonymKeyPath is where the key is: [render] pseudonym_key, else
// beside the CSV (not in the web root: with the key, anyone could tell
// who a pseudonym is by trying the lab's user names).
func pseudonymKeyPath(cfg *Config) string {
	if cfg.PseudonymKey != "" {
		return cfg.PseudonymKey
	}
	return filepath.Join(filepath.Dir(cfg.Input), DefaultPseudonymKey)
}

// pseudonymKey reads the key, or makes one (random, mode 0600) where
// there is none. A key in the page's folder is refused, through symlinks
// too: nginx would serve it. So is one that others may read or replace:
// whoever has the key tells who a pseudonym is.
func pseudonymKey(cfg *Config) ([]byte, error) {
	path := pseudonymKeyPath(cfg)
	hint := "set [render] pseudonym_key to a file outside the web root, readable only by the account render runs as"
	if inFolder(resolved(path), resolved(filepath.Dir(cfg.HTML))) {
		return nil, cli.WithHint(fmt.Errorf("pseudonym key %s: in the page's folder, where the web server would publish it", path), "%s", hint)
	}
	key, err := readKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		key, err = makeKey(path)
	}
	if err != nil {
		return nil, cli.WithHint(fmt.Errorf("pseudonym key: %w", err), "%s", hint)
	}
	if len(key) != pseudonymKeySize {
		size := fmt.Sprintf("%d bytes", len(key))
		if len(key) > pseudonymKeySize {
			size = "longer" // only a key's length and a byte were read
		}
		return nil, cli.WithHint(fmt.Errorf("pseudonym key %s: %s, want %d bytes", path, size, pseudonymKeySize),
			"remove it to have render make a new one (the pseudonyms change), or restore it from a backup")
	}
	return key, nil
}

// readKey reads the key file: a regular file (a fifo is refused, not
// waited on), ours or root's, that others can neither read nor write; at
// most one byte more than a key.
func readKey(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Mode().Perm()&0o006 != 0 {
		return nil, fmt.Errorf("%s: mode %v, others may read or replace it (chmod 600 it)", path, fi.Mode().Perm())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("%s: owned by uid %d, not by this account or root", path, st.Uid)
	}
	return io.ReadAll(io.LimitReader(f, pseudonymKeySize+1))
}

// makeKey writes a new random key at path, failing if another render made
// one meanwhile (then that one is read).
func makeKey(path string) ([]byte, error) {
	key := make([]byte, pseudonymKeySize)
	if _, err := io.ReadFull(rand.Reader, key); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".pseudonym-key-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(key); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	// a hard link, not a rename: it fails where the key appeared since
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		return os.ReadFile(path)
	} else if err != nil {
		return nil, err
	}
	return key, nil
}

// inFolder reports whether path is in dir or below it.
func inFolder(path, dir string) bool {
	p, err1 := filepath.Abs(path)
	d, err2 := filepath.Abs(dir)
	if err1 != nil || err2 != nil {
		return false
	}
	rel, err := filepath.Rel(d, filepath.Dir(p))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// resolved is path with its symlinks followed, as far as they lead: a
// web root that is a link to the CSV's folder holds the key all the same.
// A file not made yet is its folder's, resolved, then its name.
func resolved(path string) string {
	if r, err := filepath.EvalSymlinks(path); err == nil {
		return r
	}
	if r, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
		return filepath.Join(r, filepath.Base(path))
	}
	return path
}

// pseudonym is name's stable stand-in: "user-" and 8 hex digits of an
// HMAC of the name under the key. Stable across runs and files, so that
// the page still shows two GPUs are one person's; not reversible without
// the key, even by trying every user name of the lab.
func pseudonym(key []byte, name string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(name))
	return "user-" + hex.EncodeToString(m.Sum(nil)[:4])
}

// keptName reports whether a user name stays as it is with users hidden:
// the unknown user (""), and root, which is nobody's name (and whose GPU
// work a page shows by its container).
func keptName(name string) bool { return name == "" || name == "root" }

// apply makes the published report of rep: a copy with the settings
// applied to its cluster, history and teams; rep itself is not changed.
func (p *privacy) apply(rep *Report) *Report {
	if p == nil {
		return rep
	}
	out := *rep
	if p.key != nil {
		p.learnNames(rep)
	}
	out.Cluster = p.cluster(rep.Cluster)
	out.History = p.summary(rep.History)
	// a warning may name a path in a user's home (the history's, the
	// config file's)
	out.Warnings = make([]string, len(rep.Warnings))
	for i, w := range rep.Warnings {
		out.Warnings[i] = p.text(w)
	}
	cfg := *rep.Config
	cfg.Accounting = p.accounting(rep.Config.Accounting)
	out.Config = &cfg
	return &out
}

// learnNames gives each user name the report holds its pseudonym.
func (p *privacy) learnNames(rep *Report) {
	add := func(name string) {
		if !keptName(name) && p.names[name] == "" {
			p.names[name] = pseudonym(p.key, name)
		}
	}
	for _, h := range rep.Cluster.Hosts {
		for _, g := range h.GPUs {
			for _, pr := range g.Procs {
				add(pr.User)
			}
		}
	}
	for _, u := range rep.Cluster.Users {
		add(u.Name)
	}
	for _, h := range rep.Cluster.Hosts {
		if h.Reserved != nil {
			add(h.Reserved.Name)
		}
		for _, g := range h.GPUs {
			if g.Reservation != nil {
				add(g.Reservation.Name)
			}
		}
	}
	if s := rep.History; s != nil {
		for _, u := range s.Users {
			add(u.User)
		}
		for _, sp := range s.IdleHeld {
			for _, u := range sp.Users {
				add(u)
			}
		}
		for _, m := range []map[string]float64{s.Totals.User, s.Totals.IdleHeld, s.Totals.UserEnergyJ} {
			for u := range m {
				add(u)
			}
		}
		for u := range s.UserDays {
			add(u)
		}
		for u := range s.UserModels30d {
			add(u)
		}
		for u := range s.Totals.UserModelGPU {
			add(u)
		}
	}
	for _, t := range rep.Config.Accounting.Teams {
		for _, m := range t.Members {
			add(m)
		}
	}
	p.scrub = newNameFinder(slices.Collect(maps.Keys(p.names)))
}

// user is name as published.
func (p *privacy) user(name string) string {
	if p.key == nil || keptName(name) {
		return name
	}
	if ps := p.names[name]; ps != "" {
		return ps
	}
	return pseudonym(p.key, name)
}

// text is free text (a job's or container's name, a comment) with every
// user name in it replaced by its pseudonym.
func (p *privacy) text(s string) string {
	if p.key == nil || p.scrub == nil || s == "" {
		return s
	}
	if out, ok := p.done[s]; ok {
		return out
	}
	out := p.scrub.replace(s, p.names)
	p.done[s] = out
	return out
}

// command is a command line as published: whole, its program's name
// only, or nothing; user names in it pseudonymized.
func (p *privacy) command(c string) string {
	switch p.commands {
	case CommandsHide:
		return ""
	case CommandsProgram:
		c = programName(c) // a substring: no copy
	}
	return p.text(c)
}

// programName is a command line's program, by base name: "python" of
// "/opt/conda/bin/python -u train.py --token x", "python.exe" of
// Windows' "C:\Python\python.exe".
func programName(c string) string {
	c = strings.TrimSpace(c)
	if i := exeEnd(c); i >= 0 { // "C:\Program Files\...\app.exe --flag"
		c = c[:i]
	} else if i := strings.IndexAny(c, " \t"); i >= 0 {
		c = c[:i]
	}
	if i := strings.LastIndexAny(c, `/\`); i >= 0 {
		c = c[i+1:]
	}
	return c
}

// exeEnd is where a Windows program's path ends (after ".exe", in any
// letter case), -1 in a command line that has none or does not start
// with a Windows path (C:\, \\server, quoted): a Linux command's
// argument may hold both, and what came before it would be shown.
func exeEnd(c string) int {
	p := strings.TrimPrefix(c, `"`)
	drive := len(p) >= 3 && (p[0]|0x20 >= 'a' && p[0]|0x20 <= 'z') && p[1] == ':' && (p[2] == '\\' || p[2] == '/')
	if !drive && !strings.HasPrefix(p, `\\`) {
		return -1
	}
	for i := 0; i+4 <= len(c); i++ {
		if strings.EqualFold(c[i:i+4], ".exe") {
			return i + 4
		}
	}
	return -1
}

// cluster is a copy of c as published. Classification (busy, ignored
// programs) was made on the real command lines before.
func (p *privacy) cluster(c *cluster.Cluster) *cluster.Cluster {
	out := *c
	resv := map[*reservations.Reservation]*reservations.Reservation{nil: nil}
	// one allocation for all the hosts, GPUs and processes each: a
	// 10,000-host fleet has 80,000 GPUs
	nGPUs, nProcs := 0, 0
	for _, h := range c.Hosts {
		nGPUs += len(h.GPUs)
		for _, g := range h.GPUs {
			nProcs += len(g.Procs)
		}
	}
	hosts, gpus, procs := make([]cluster.Host, len(c.Hosts)), make([]cluster.GPU, 0, nGPUs), make([]cluster.Proc, 0, nProcs)
	gpuPtrs, procPtrs := make([]*cluster.GPU, 0, nGPUs), make([]*cluster.Proc, 0, nProcs)
	out.Hosts = make([]*cluster.Host, len(c.Hosts))
	for i, h := range c.Hosts {
		nh := &hosts[i]
		*nh = *h
		nh.Error = p.text(h.Error)
		nh.Reserved = p.reservation(h.Reserved, resv)
		first := len(gpuPtrs)
		for _, g := range h.GPUs {
			gpus = append(gpus, *g)
			ng := &gpus[len(gpus)-1]
			ng.Reservation = p.reservation(g.Reservation, resv)
			firstProc := len(procPtrs)
			for _, pr := range g.Procs {
				procs = append(procs, *pr)
				np := &procs[len(procs)-1]
				np.User = p.user(pr.User)
				np.Command = p.command(pr.Command)
				np.SlurmJobName = p.text(pr.SlurmJobName)
				np.SlurmAccount = p.text(pr.SlurmAccount)
				np.SlurmPartition = p.text(pr.SlurmPartition) // gpu-smith, the lab head's
				np.ContainerName = p.text(pr.ContainerName)
				procPtrs = append(procPtrs, np)
			}
			ng.Procs = procPtrs[firstProc:len(procPtrs):len(procPtrs)]
			gpuPtrs = append(gpuPtrs, ng)
		}
		nh.GPUs = gpuPtrs[first:len(gpuPtrs):len(gpuPtrs)]
		out.Hosts[i] = nh
	}
	out.Users = make([]*cluster.User, len(c.Users))
	for i, u := range c.Users {
		nu := *u
		nu.Name = p.user(u.Name)
		nu.Containers = make([]string, len(u.Containers))
		for j, ct := range u.Containers {
			nu.Containers[j] = p.text(ct)
		}
		out.Users[i] = &nu
	}
	return &out
}

// reservation is r as published, one copy for each reservation however
// many GPUs share it.
func (p *privacy) reservation(r *reservations.Reservation, done map[*reservations.Reservation]*reservations.Reservation) *reservations.Reservation {
	if nr, ok := done[r]; ok {
		return nr
	}
	nr := *r
	if p.key != nil {
		// whoever it is for: hidden as a user is, even one who holds
		// no GPU now (it may be words, "ICML team": hidden all the same)
		nr.Name = p.user(nr.Name)
	}
	nr.Comment = p.text(r.Comment)
	done[r] = &nr
	return &nr
}

// summary is a copy of s as published: every user-keyed figure under the
// user's pseudonym.
func (p *privacy) summary(s *history.Summary) *history.Summary {
	if s == nil || p.key == nil {
		return s
	}
	out := *s
	out.Users = make([]history.UserHours, len(s.Users))
	for i, u := range s.Users {
		u.User = p.user(u.User)
		out.Users[i] = u
	}
	out.IdleHeld = make([]history.Spell, len(s.IdleHeld))
	for i, sp := range s.IdleHeld {
		users := make([]string, len(sp.Users))
		for j, u := range sp.Users {
			users[j] = p.user(u)
		}
		sp.Users = users
		out.IdleHeld[i] = sp
	}
	out.UserDays = renameKeys(s.UserDays, p.user)
	out.UserModels30d = renameKeys(s.UserModels30d, p.user)
	out.Totals.User = renameKeys(s.Totals.User, p.user)
	out.Totals.IdleHeld = renameKeys(s.Totals.IdleHeld, p.user)
	out.Totals.UserEnergyJ = renameKeys(s.Totals.UserEnergyJ, p.user)
	out.Totals.UserModelGPU = renameKeys(s.Totals.UserModelGPU, p.user)
	return &out
}

// accounting is a copy of a with the teams' members and leads
// pseudonymized, so that the history's pseudonymized users still add up
// to their teams.
func (p *privacy) accounting(a accounting.Config) accounting.Config {
	if p.key == nil {
		return a
	}
	a.Teams = slices.Clone(a.Teams)
	for i, t := range a.Teams {
		members := make([]string, len(t.Members))
		for j, m := range t.Members {
			members[j] = p.user(m)
		}
		a.Teams[i].Members = members
		a.Teams[i].Lead = p.text(t.Lead)
	}
	return a
}

// renameKeys is m with each key renamed; nil stays nil.
func renameKeys[V any](m map[string]V, rename func(string) string) map[string]V {
	if m == nil {
		return nil
	}
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[rename(k)] = v
	}
	return out
}

// nameFinder finds user names in free text: whole words only ("ali" is
// not found in "alibaba"), but for digits after one ("alice2"), letter
// case ignored ("Alice-run" holds alice).
type nameFinder struct {
	byLower map[string]string // lower-case name -> the name
	longest int
}

func newNameFinder(names []string) *nameFinder {
	f := &nameFinder{byLower: map[string]string{}}
	for _, n := range names {
		f.byLower[strings.ToLower(n)] = n
		f.longest = max(f.longest, len(n))
	}
	return f
}

// replace is s with every name found replaced by with[name]. At each
// word start it tries the longest name first, so that "ann.lee" wins
// over "ann".
func (f *nameFinder) replace(s string, with map[string]string) string {
	if s == "" || len(f.byLower) == 0 {
		return s
	}
	var b strings.Builder
	last := 0
	lower := strings.ToLower(s)
	if len(lower) != len(s) { // a rune whose lower case has another length: match as is
		lower = s
	}
	for i := 0; i < len(s); {
		if i > 0 && wordByte(s[i-1]) || !wordByte(s[i]) {
			i++
			continue
		}
		n := 0
		for l := min(f.longest, len(s)-i); l > 0; l-- {
			// digits may follow: runs are numbered (alice2, alice2024-ft)
			if i+l < len(s) && wordByte(s[i+l]) && !isDigit(s[i+l]) {
				continue
			}
			if _, ok := f.byLower[lower[i:i+l]]; ok {
				n = l
				break
			}
		}
		if n == 0 {
			i++
			continue
		}
		b.WriteString(s[last:i])
		b.WriteString(with[f.byLower[lower[i:i+n]]])
		i += n
		last = i
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// wordByte reports whether c may be inside a word: letters and digits;
// "-", "_", "." and "/" end one, as in alice-run, /home/alice.
func wordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// privacyText says on the page what its settings hide, so that a reader
// takes a "user-5e1f0c9a" for what it is; "" when nothing is hidden.
func privacyText(cfg *Config) string {
	var parts []string
	switch cfg.Commands {
	case CommandsProgram:
		parts = append(parts, "commands shown as program names only")
	case CommandsHide:
		parts = append(parts, "commands hidden")
	}
	if cfg.Users == UsersHide {
		parts = append(parts, "user names replaced by pseudonyms")
	}
	return strings.Join(parts, "; ")
}
