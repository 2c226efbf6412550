// Package ttywatch tells whether somebody is working at a terminal of this
// machine, the way `w` tells idle time: a terminal's activity is the access
// time of its device file (the kernel updates it on input), its user is the
// owner of the device file. Terminals are /dev/pts/N, /dev/ttyN owned by
// someone other than root (login hands the console to the user), and every
// line of a USER_PROCESS record in utmp, when there is a utmp.
package ttywatch

import (
	"encoding/binary"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Watcher finds active terminal users.
type Watcher struct {
	Dev       string // "/dev" unless set
	Utmp      string // "/var/run/utmp" unless set; a missing file is fine
	Idle      time.Duration
	Whitelist []string

	names map[uint32]string
}

// Active is a terminal in use.
type Active struct {
	User string
	TTY  string // e.g. pts/3
	Idle time.Duration
}

func (a Active) String() string {
	return a.User + " on " + a.TTY
}

// Active lists the terminals of non-whitelisted users with input within the
// idle time, most recently used first.
func (w *Watcher) Active(now time.Time) []Active {
	dev := w.Dev
	if dev == "" {
		dev = "/dev"
	}
	utmp := w.Utmp
	if utmp == "" {
		utmp = "/var/run/utmp"
	}
	lines := map[string]bool{}
	if ents, err := os.ReadDir(filepath.Join(dev, "pts")); err == nil {
		for _, e := range ents {
			if isDigits(e.Name()) {
				lines["pts/"+e.Name()] = true
			}
		}
	}
	if ents, err := os.ReadDir(dev); err == nil {
		for _, e := range ents {
			if n := e.Name(); strings.HasPrefix(n, "tty") && isDigits(n[3:]) {
				lines[n] = false // only when not root's
			}
		}
	}
	for _, l := range utmpLines(utmp) {
		lines[l] = true
	}
	var out []Active
	for line, anyOwner := range lines {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dev, line), &st); err != nil {
			continue
		}
		if st.Uid == 0 && !anyOwner {
			continue
		}
		atime := time.Unix(st.Atim.Unix())
		idle := now.Sub(atime)
		if idle >= w.Idle {
			continue
		}
		name := w.userName(st.Uid)
		if w.whitelisted(name) {
			continue
		}
		if idle < 0 {
			idle = 0
		}
		out = append(out, Active{User: name, TTY: line, Idle: idle})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Idle != out[j].Idle {
			return out[i].Idle < out[j].Idle
		}
		return out[i].TTY < out[j].TTY
	})
	return out
}

func (w *Watcher) whitelisted(name string) bool {
	for _, u := range w.Whitelist {
		if u == name {
			return true
		}
	}
	return false
}

// userName is the name of uid, or the number when it has none.
func (w *Watcher) userName(uid uint32) string {
	if n, ok := w.names[uid]; ok {
		return n
	}
	if w.names == nil {
		w.names = map[uint32]string{}
	}
	n := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(n); err == nil {
		n = u.Username
	}
	w.names[uid] = n
	return n
}

// utmp record layout of glibc on Linux (x86-64 and arm64 alike).
const (
	utmpSize      = 384
	utUserProcess = 7
	utLineOffset  = 8
	utLineSize    = 32
)

// utmpLines returns the terminal lines (pts/0, tty1) of the USER_PROCESS
// records in a utmp file; nothing when it is missing or unreadable.
func utmpLines(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for len(b) >= utmpSize {
		rec := b[:utmpSize]
		b = b[utmpSize:]
		if int16(binary.LittleEndian.Uint16(rec[0:2])) != utUserProcess {
			continue
		}
		line := rec[utLineOffset : utLineOffset+utLineSize]
		if i := strings.IndexByte(string(line), 0); i >= 0 {
			line = line[:i]
		}
		l := filepath.Clean(string(line))
		if l == "." || l == "" || strings.HasPrefix(l, "..") || strings.HasPrefix(l, "/") || strings.Contains(l, ":") {
			continue // X displays (":0") and odd entries have no device
		}
		out = append(out, l)
	}
	return out
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
