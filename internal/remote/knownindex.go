package remote

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"

	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"
	xknownhosts "golang.org/x/crypto/ssh/knownhosts"
)

// knownIndex is known_hosts read once for a whole fleet.
//
// x/crypto's knownhosts matches every line against the host for each
// lookup, so checking N hosts against a known_hosts of N lines costs N²
// matches: at 10,000 hosts, a third of fetch's CPU. Most lines of a
// fleet's known_hosts name their hosts plainly (what ssh-keyscan and
// accept-new write); those are looked up here by host and port. Every
// other line (a marker, a hashed name, a wildcard or a negation, or a line
// that does not parse) keeps its meaning by going through knownhosts as
// before, which then reads only those lines: a hashed known_hosts still
// costs a keyed hash per line and lookup, as it does in OpenSSH.
type knownIndex struct {
	plain map[hostPort][]knownLine
	// restRaw is x/crypto knownhosts' callback on the other lines (nil when
	// there are none). restFiles maps the files it read back to the
	// known_hosts files they stand for, line for line.
	restRaw     ssh.HostKeyCallback
	restFiles   map[string]string
	authorities map[fileLine]bool // the @cert-authority lines
	// wildcards are the lines knownhosts.HostKeyDB takes for wildcards (in
	// any file, comments included): with one, check tries port 22 again
	wildcards map[fileLine]bool
}

type fileLine struct {
	file string
	line int
}

type hostPort struct{ host, port string }

type knownLine struct {
	key  ssh.PublicKey
	blob string // key.Marshal(), compared with what a host offers
	file string
	line int
}

// loadKnownIndex reads files (all existing).
func loadKnownIndex(files []string) (*knownIndex, error) {
	ix := &knownIndex{plain: map[hostPort][]knownLine{}, restFiles: map[string]string{}, authorities: map[fileLine]bool{}, wildcards: map[fileLine]bool{}}
	var restPaths []string // the files handed to knownhosts
	var open []*os.File
	left := map[string]bool{} // the temporary files still to remove
	defer func() {
		for _, f := range open {
			f.Close()
			if left[f.Name()] {
				os.Remove(f.Name())
			}
		}
	}()
	var readErr error
	for _, file := range files {
		rest, err := ix.readFile(file)
		if err != nil {
			// knownhosts would have stopped at an error in the lines before
			readErr = err
		}
		if rest != nil {
			// The other lines go to knownhosts from a file of their own in
			// which every plain line is left blank, so that the line numbers
			// it reports are those of the real file.
			tmp, err := os.CreateTemp("", "gpumon-known_hosts-*")
			if err != nil {
				return loadUnindexed(files)
			}
			open = append(open, tmp)
			left[tmp.Name()] = true
			name, err := writeRest(tmp, rest)
			if err != nil {
				return loadUnindexed(files)
			}
			left[tmp.Name()] = name == tmp.Name()
			restPaths = append(restPaths, name)
			ix.restFiles[name] = file
		}
		if readErr != nil {
			break
		}
	}
	if len(restPaths) == 0 {
		if readErr != nil {
			return nil, readErr
		}
		return ix, nil
	}
	raw, err := xknownhosts.New(restPaths...)
	if err != nil {
		return nil, errors.New(ix.realNames(err.Error()))
	}
	if readErr != nil {
		return nil, readErr
	}
	ix.restRaw = raw
	return ix, nil
}

// writeRest writes rest to tmp, still open, and returns the name knownhosts
// is to open it by: where the system has one, the name of the open file
// itself (/dev/fd/N), and the file is removed from the temporary folder,
// so that nothing another user could put in its place there is read
// instead, whatever that folder's permissions.
func writeRest(tmp *os.File, rest []byte) (string, error) {
	if _, err := tmp.Write(rest); err != nil {
		return "", err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil { // /dev/fd/N may share the offset
		return "", err
	}
	self := fmt.Sprintf("/dev/fd/%d", tmp.Fd())
	written, err := tmp.Stat()
	if err != nil {
		return "", err
	}
	if fi, err := os.Stat(self); err != nil || !os.SameFile(fi, written) {
		return tmp.Name(), nil
	}
	if err := os.Remove(tmp.Name()); err != nil {
		return tmp.Name(), nil
	}
	return self, nil
}

// loadUnindexed hands knownhosts the known_hosts files themselves, where
// the index cannot write the files it would hand it (no temporary folder,
// or a full one): slower, but the same answers, and no error knownhosts
// would not give.
func loadUnindexed(files []string) (*knownIndex, error) {
	raw, err := xknownhosts.New(files...)
	if err != nil {
		return nil, err
	}
	ix := &knownIndex{plain: map[hostPort][]knownLine{}, restRaw: raw, restFiles: map[string]string{},
		authorities: map[fileLine]bool{}, wildcards: map[fileLine]bool{}}
	for _, file := range files {
		// as knownhosts.HostKeyDB reads them again
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			if isWildcard(sc.Bytes()) {
				ix.wildcards[fileLine{file, n}] = true
			}
			if isAuthority(sc.Bytes()) {
				ix.authorities[fileLine{file, n}] = true
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("knownhosts: %s: %v", file, err)
		}
	}
	return ix, nil
}

// readFile indexes file's plain lines and returns the file with them
// blanked, or nil when every line was plain; on a read error, as much of it
// as was read.
func (ix *knownIndex) readFile(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rest bytes.Buffer
	anyRest := false
	sc := bufio.NewScanner(f) // as knownhosts reads it, with its line limit
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		// as knownhosts.HostKeyDB tells them, on every line (a plain one
		// too: it trims more white space than knownhosts)
		if isWildcard(line) {
			ix.wildcards[fileLine{file, n}] = true
		}
		if isAuthority(line) {
			ix.authorities[fileLine{file, n}] = true
		}
		if ix.addPlain(line, file, n) {
			rest.WriteByte('\n')
			continue
		}
		anyRest = true
		rest.Write(line)
		if bytes.HasSuffix(line, []byte("\r")) {
			// the scanner drops one carriage return before a newline: write
			// it back, or knownhosts would read this line without its own
			rest.WriteByte('\r')
		}
		rest.WriteByte('\n')
	}
	err = sc.Err()
	if err != nil {
		err = fmt.Errorf("knownhosts: %s: %v", file, err)
	}
	if !anyRest {
		return nil, err
	}
	return rest.Bytes(), err
}

// addPlain indexes line when it names hosts plainly, parsed exactly as
// knownhosts parses it, and says whether it did. Blank lines and comments
// count as plain: there is nothing in them to keep.
func (ix *knownIndex) addPlain(line []byte, file string, n int) bool {
	line = trimBlanks(line)
	if len(line) == 0 || line[0] == '#' {
		return true
	}
	if line[0] == '@' {
		return false
	}
	pattern, line := nextWord(line)
	if pattern == "" || pattern[0] == '|' || strings.ContainsAny(pattern, "*?!") {
		return false
	}
	keyType, line := nextWord(line)
	blob, _ := nextWord(line)
	raw, err := base64.StdEncoding.DecodeString(blob)
	if err != nil {
		return false
	}
	key, err := ssh.ParsePublicKey(raw)
	if err != nil {
		return false
	}
	if _, cert := key.(*ssh.Certificate); cert || key.Type() != keyType {
		return false
	}
	var hosts []hostPort
	for _, p := range strings.Split(pattern, ",") {
		if p == "" {
			continue
		}
		host, port, err := net.SplitHostPort(p)
		if err != nil {
			if p[0] == '[' {
				return false // knownhosts refuses it: let it say so
			}
			host, port = p, "22"
		}
		hosts = append(hosts, hostPort{host, port})
	}
	kl := knownLine{key: key, blob: string(raw), file: file, line: n}
	var seen map[hostPort]bool
	if len(hosts) > 1 {
		seen = make(map[hostPort]bool, len(hosts))
	}
	for _, hp := range hosts {
		if seen[hp] {
			continue // one line, one key on record, however often it names the host
		}
		if seen != nil {
			seen[hp] = true
		}
		ix.plain[hp] = append(ix.plain[hp], kl)
	}
	return true
}

// isAuthority is how knownhosts.HostKeyDB tells a @cert-authority line.
func isAuthority(line []byte) bool {
	line = bytes.TrimSpace(line)
	return len(line) > 15 && bytes.HasPrefix(line, []byte("@cert-authority")) && (line[15] == ' ' || line[15] == '\t')
}

// isWildcard is how knownhosts.HostKeyDB tells a wildcard line: a host
// pattern with a * and no port after it.
func isWildcard(line []byte) bool {
	line = bytes.TrimSpace(line)
	if isAuthority(line) {
		line = bytes.TrimSpace(line[16:])
	}
	if i := bytes.IndexAny(line, "\t "); i >= 0 {
		line = line[:i]
	}
	i := bytes.IndexRune(line, '*')
	return i >= 0 && !bytes.Contains(line[i:], []byte("]:"))
}

// nextWord is knownhosts' own: the text up to the first space or tab, and
// what follows it, trimmed.
func nextWord(line []byte) (string, []byte) {
	i := bytes.IndexAny(line, "\t ")
	if i == -1 {
		return string(line), nil
	}
	return string(line[:i]), trimBlanks(line[i:])
}

// trimBlanks is knownhosts' trimSpace: spaces and tabs only. A line that
// starts with another blank (a carriage return, a no-break space) names a
// host with that character in it, for knownhosts as for the index.
func trimBlanks(b []byte) []byte { return bytes.Trim(b, " \t") }

// lookupAddress is the host and port knownhosts looks up: address, or the
// remote address when there is none. An address without a port is an error
// (knownhosts' own), not port 22, and so is a remote address without one,
// even beside a host name. (No remote address at all, where knownhosts
// would panic, is taken as one that would do.)
func lookupAddress(address string, remote net.Addr) (hostPort, error) {
	var remoteHP hostPort
	if tcp, ok := remote.(*net.TCPAddr); ok && tcp != nil && address != "" {
		// its String always has a port: no need to make it (a lookup's time)
	} else if remote != nil {
		host, port, err := net.SplitHostPort(remote.String())
		if err != nil {
			return hostPort{}, fmt.Errorf("knownhosts: SplitHostPort(%s): %v", remote, err)
		}
		remoteHP = hostPort{host, port}
	}
	if address == "" {
		return remoteHP, nil
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return hostPort{}, fmt.Errorf("knownhosts: SplitHostPort(%s): %v", address, err)
	}
	return hostPort{host, port}, nil
}

// placeholder is the remote address knownhosts.HostKeyDB looks keys up with.
var placeholder = &net.TCPAddr{IP: net.IPv4zero}

// check is knownhosts.HostKeyDB's callback over both halves: x/crypto's
// (checkRaw), and then, for a host off port 22 that nothing on record names
// when the files have a wildcard line, the same at port 22, where a key on
// any line is accepted and only wildcard lines are kept as wanted.
func (ix *knownIndex) check(address string, remote net.Addr, key ssh.PublicKey) error {
	err := ix.checkRaw(address, remote, key)
	if err == nil || knownhosts.IsHostKeyChanged(err) || len(ix.wildcards) == 0 {
		return err
	}
	host, port, splitErr := net.SplitHostPort(address)
	if splitErr != nil || port == "" || port == "22" {
		return err
	}
	if tcp, ok := remote.(*net.TCPAddr); ok && tcp != nil && tcp.Port != 22 {
		remote = &net.TCPAddr{IP: tcp.IP, Port: 22, Zone: tcp.Zone}
	}
	err = ix.checkRaw(host+":22", remote, key)
	var ke *xknownhosts.KeyError
	if errors.As(err, &ke) && len(ke.Want) > 0 {
		wild := make([]xknownhosts.KnownKey, 0, len(ke.Want))
		for _, w := range ke.Want {
			if ix.wildcards[fileLine{w.Filename, w.Line}] {
				wild = append(wild, w)
			}
		}
		err = &xknownhosts.KeyError{Want: wild}
	}
	return err
}

// checkRaw is x/crypto knownhosts' callback over both halves: a revoked key
// is refused whatever else is on record; a key on record for the host in
// either half is accepted; otherwise the keys on record in both are what
// was wanted (none: the host is unknown).
func (ix *knownIndex) checkRaw(address string, remote net.Addr, key ssh.PublicKey) error {
	var plain []knownLine
	if _, cert := key.(*ssh.Certificate); !cert {
		hp, err := lookupAddress(address, remote)
		if err != nil && ix.restRaw == nil {
			return err
		}
		plain = ix.plain[hp]
	}
	var want []xknownhosts.KnownKey
	if ix.restRaw != nil {
		err := ix.restRaw(address, remote, key)
		if err == nil {
			return nil
		}
		var ke *xknownhosts.KeyError
		if !errors.As(err, &ke) {
			var re *xknownhosts.RevokedError
			if errors.As(err, &re) {
				re.Revoked.Filename = ix.realName(re.Revoked.Filename)
			}
			return err
		}
		for _, w := range ke.Want {
			w.Filename = ix.realName(w.Filename)
			want = append(want, w)
		}
	} else if _, cert := key.(*ssh.Certificate); cert {
		// what knownhosts says with no @cert-authority line
		noAuthority := ssh.CertChecker{IsHostAuthority: func(ssh.PublicKey, string) bool { return false }}
		return noAuthority.CheckHostKey(address, remote, key)
	}
	offered := string(key.Marshal())
	for _, kl := range plain {
		if kl.blob == offered {
			return nil
		}
		want = append(want, xknownhosts.KnownKey{Key: kl.key, Filename: kl.file, Line: kl.line})
	}
	return &xknownhosts.KeyError{Want: want}
}

// algorithms are the host key algorithms to ask address for, as
// knownhosts.HostKeyDB.HostKeyAlgorithms gives them: those of the keys on
// record in file and line order, a certificate's where a certificate
// authority vouches for the host, without repeats.
func (ix *knownIndex) algorithms(address string) []string {
	// knownhosts.HostKeyDB offers a key that matches none and sorts what was
	// wanted by file name: the names of the known_hosts files, not of those
	// the index hands knownhosts
	var keys []xknownhosts.KnownKey
	var ke *xknownhosts.KeyError
	if errors.As(ix.check(address, placeholder, noKey{}), &ke) {
		keys = append(keys, ke.Want...)
	}
	sort.SliceStable(keys, func(i, j int) bool {
		if keys[i].Filename != keys[j].Filename {
			return keys[i].Filename < keys[j].Filename
		}
		return keys[i].Line < keys[j].Line
	})
	var algos []string
	seen := map[string]bool{}
	add := func(a string, cert bool) {
		if cert {
			a = certAlgorithms[a]
		}
		if !seen[a] {
			seen[a] = true
			algos = append(algos, a)
		}
	}
	for _, k := range keys {
		cert := ix.authorities[fileLine{k.Filename, k.Line}]
		if t := k.Key.Type(); t == ssh.KeyAlgoRSA {
			// an RSA key is offered under its SHA-2 signature algorithms
			add(ssh.KeyAlgoRSASHA512, cert)
			add(ssh.KeyAlgoRSASHA256, cert)
		}
		add(k.Key.Type(), cert)
	}
	return algos
}

// certAlgorithms are the certificate algorithms of key types (knownhosts'
// keyTypeToCertAlgo).
var certAlgorithms = map[string]string{
	ssh.KeyAlgoRSA:        ssh.CertAlgoRSAv01,
	ssh.KeyAlgoRSASHA256:  ssh.CertAlgoRSASHA256v01,
	ssh.KeyAlgoRSASHA512:  ssh.CertAlgoRSASHA512v01,
	ssh.KeyAlgoDSA:        ssh.CertAlgoDSAv01,
	ssh.KeyAlgoECDSA256:   ssh.CertAlgoECDSA256v01,
	ssh.KeyAlgoSKECDSA256: ssh.CertAlgoSKECDSA256v01,
	ssh.KeyAlgoECDSA384:   ssh.CertAlgoECDSA384v01,
	ssh.KeyAlgoECDSA521:   ssh.CertAlgoECDSA521v01,
	ssh.KeyAlgoED25519:    ssh.CertAlgoED25519v01,
	ssh.KeyAlgoSKED25519:  ssh.CertAlgoSKED25519v01,
}

// noKey is offered to learn which keys are on record: it matches none.
type noKey struct{}

func (noKey) Type() string                        { return "none" }
func (noKey) Marshal() []byte                     { return []byte("gpumon: no key") }
func (noKey) Verify([]byte, *ssh.Signature) error { return errors.New("no key") }

func (ix *knownIndex) realName(name string) string {
	if real, ok := ix.restFiles[name]; ok {
		return real
	}
	return name
}

// realNames puts the known_hosts files' names for those of the files the
// index handed knownhosts in its error, where each is followed by a colon:
// one temporary name can begin another ("…-123" and "…-1234").
func (ix *knownIndex) realNames(s string) string {
	for tmp, real := range ix.restFiles {
		s = strings.ReplaceAll(s, tmp+":", real+":")
	}
	return s
}
