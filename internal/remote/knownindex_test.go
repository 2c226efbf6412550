package remote

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/testenv"
	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"
	xknownhosts "golang.org/x/crypto/ssh/knownhosts"
)

// The index must say what knownhosts says, for every kind of line: it is
// compared, lookup by lookup, with knownhosts reading the same files.
func TestKnownIndexAgreesWithKnownhosts(t *testing.T) {
	a, b, e := testEd25519(t), testEd25519(t), testECDSA(t)
	ca := testEd25519Signer(t)
	cert := testHostCert(t, ca, a, "gpu07")
	line := func(hosts string, k ssh.PublicKey) string { return hosts + " " + string(ssh.MarshalAuthorizedKey(k)) }
	files := map[string]string{
		"plain": line("gpu01", a) + line("gpu02,10.0.0.2", b) + line("[gpu03]:2222", a) +
			line("gpu04", a) + line("gpu04", e) + // two keys on record
			"\n# a comment\n   \n" + line("gpu05", b),
		"hashed":   line(xknownhosts.HashHostname("gpu11"), a) + line(xknownhosts.HashHostname("[gpu12]:2222"), b),
		"wildcard": line("*.lab", a) + line("gpu2?", b) + line("gpu3*,!gpu31", a) + line("gpu01", b),
		"markers": "@cert-authority gpu0* " + string(ssh.MarshalAuthorizedKey(ca.PublicKey())) +
			"@revoked * " + string(ssh.MarshalAuthorizedKey(e)) + line("gpu06", a),
		"broken":  line("gpu01", a) + "gpu02 ssh-ed25519 !!notbase64\n",
		"bracket": line("[gpu08]", a),
		"blanks":  "\r" + line("gpu01", a) + "\u00a0" + line("gpu02", b) + " \t" + line("gpu04", a) + "gpu05\v " + string(ssh.MarshalAuthorizedKey(a)),
		"mixed": line("gpu01", a) + line(xknownhosts.HashHostname("gpu02"), a) + line("gpu02", b) +
			line("gpu3*", b) + line("gpu31", a),
		// a line that is a lone carriage return before "\r\n": knownhosts
		// refuses it (a host pattern of "\r" and nothing else)
		"crcr": line("gpu01", a) + "\r\r\n",
		// the remote address is what knownhosts looks up when no host name is given
		"remote": line("127.0.0.1", a),
		// knownhosts.HostKeyDB tries port 22 again when any line (a comment
		// too) looks like a wildcard, and then accepts a key on any line
		"commentwild": line("gpu01", a) + "#*\n",
		// algorithms come in the order of the files' names, whatever
		// the files the index hands knownhosts are called
		"order1": line(xknownhosts.HashHostname("gpu13"), a),
		"order2": "@cert-authority gpu13 " + string(ssh.MarshalAuthorizedKey(ca.PublicKey())),
		"order3": line(xknownhosts.HashHostname("gpu13"), e),
		"order4": "@cert-authority gpu13 " + string(ssh.MarshalAuthorizedKey(e)),
		// a host named "\v@cert-authority" for knownhosts, whose line
		// knownhosts.HostKeyDB (trimming all white space) takes for a CA's
		"vca": "\v@cert-authority " + string(ssh.MarshalAuthorizedKey(a)),
		// a line longer than bufio.Scanner's limit, after a line knownhosts refuses
		// a host twice on one line is one key on record, once
		"twice":   line("gpu01,gpu01", a) + line("gpu02,[gpu02]:22,gpu02", b),
		"spelled": line("[gpu01]:,[gpu03]:02222,GPU01,fe80::1%eth0", b) + line("*:2222", a),
		"long":    line("gpu01", a) + strings.Repeat("x", 70000) + "\n",
		"badlong": "gpu0* ssh-ed25519 !!bad\n" + strings.Repeat("x", 70000) + "\n",
	}
	// lines about bufio.Scanner's limit of 64 KiB, ending in "\n", "\r\n",
	// "\r\r\n" or nothing
	for _, n := range []int{65533, 65534, 65535, 65536} {
		wild := line("*.lab", a)
		wild = wild[:len(wild)-1] + " "
		for name, end := range map[string]string{"lf": "\n", "crlf": "\r\n", "crcrlf": "\r\r\n", "eof": ""} {
			files[fmt.Sprintf("edge%d%s", n, name)] = wild + strings.Repeat("x", n-len(wild)) + end
		}
	}
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	for name, text := range files {
		if err := os.WriteFile(path(name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addresses := []string{"gpu01:22", "gpu02:22", "10.0.0.2:22", "gpu03:2222", "gpu03:22", "gpu04:22", "gpu05:22",
		"gpu06:22", "gpu07:22", "gpu11:22", "gpu12:2222", "x.lab:22", "x.lab:2222", "gpu21:22", "gpu30:22", "gpu31:22",
		"gpu08:22", "nowhere:22", "[::1]:22", "gpu13:22", "\v@cert-authority:22",
		// no port: knownhosts refuses the address; none: it looks up the remote address
		"gpu01", "", "127.0.0.1",
		// off port 22, where knownhosts.HostKeyDB tries port 22 again
		"gpu01:2222", "gpu31:2222", "gpu11:2222",
		// spellings of a host and port
		"[gpu01]:22", "gpu03:02222", "GPU01:22", "gpu01:", "[fe80::1%eth0]:22",
	}
	userCert := testHostCert(t, ca, a, "gpu07")
	userCert.CertType = ssh.UserCert // a user certificate offered as a host key
	if err := userCert.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	offers := map[string]ssh.PublicKey{"a": a, "b": b, "ecdsa": e, "cert": cert, "usercert": userCert}
	sets := [][]string{
		{"plain"}, {"hashed"}, {"wildcard"}, {"markers"}, {"broken"}, {"bracket"}, {"mixed"}, {"blanks"},
		{"plain", "hashed"}, {"markers", "plain", "wildcard"}, {"mixed", "plain"}, {"crcr"}, {"remote"}, {"remote", "hashed"}, {"commentwild"},
		{"order4", "order2", "order3", "order1"}, {"order1", "order2", "order3", "order4"}, {"vca"},
		// the first error knownhosts meets, file by file and line by line
		{"twice"}, {"twice", "wildcard"}, {"spelled"}, {"spelled", "plain"}, {"long"}, {"badlong"}, {"broken", "long"}, {"broken", "missing"}, {"missing", "broken"},
	}
	for name := range files {
		if strings.HasPrefix(name, "edge") {
			sets = append(sets, []string{name})
		}
	}
	for _, set := range sets {
		var paths []string
		for _, name := range set {
			paths = append(paths, path(name))
		}
		db, dbErr := knownhosts.NewDB(paths...)
		ix, ixErr := loadKnownIndex(paths)
		if (dbErr == nil) != (ixErr == nil) || (dbErr != nil && dbErr.Error() != ixErr.Error() && !namesFile(ixErr, dbErr)) {
			t.Errorf("%v: loading: knownhosts says %v, the index %v", set, dbErr, ixErr)
			continue
		}
		if dbErr != nil {
			continue
		}
		callback := db.HostKeyCallback()
		for _, address := range addresses {
			if diff := cmp.Diff(db.HostKeyAlgorithms(address), ix.algorithms(address)); diff != "" {
				t.Errorf("%v %s: algorithms (-knownhosts +index):\n%s", set, address, diff)
			}
			for name, key := range offers {
				// knownhosts needs a remote address with a port, even with a host name
				for _, remote := range []net.Addr{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 22}, &net.UnixAddr{Name: "/sock", Net: "unix"}} {
					want, got := verdict(callback(address, remote, key)), verdict(ix.check(address, remote, key))
					if want != got {
						t.Errorf("%v %s from %v offering %s:\nknownhosts: %s\nindex:      %s", set, address, remote, name, want, got)
					}
				}
			}
		}
	}
}

// A known_hosts of plain lines is read once, whatever the size of the fleet:
// the index answers from its map and knownhosts is never built.
func TestKnownIndexPlainFileNeedsNoKnownhosts(t *testing.T) {
	a, b := testEd25519(t), testEd25519(t)
	var text strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&text, "[gpu%04d]:2222 %s", i, ssh.MarshalAuthorizedKey(a))
	}
	ix, file := indexOf(t, text.String())
	if ix.restRaw != nil {
		t.Fatal("plain lines went through knownhosts")
	}
	if err := ix.check("gpu0999:2222", nil, a); err != nil {
		t.Errorf("the key on record was refused: %v", err)
	}
	if got := verdict(ix.check("gpu0999:2222", nil, b)); got != "changed "+file+":1000" {
		t.Errorf("another key: %s, want it changed, naming line 1000", got)
	}
	if got := verdict(ix.check("gpu0999:22", nil, a)); got != "unknown" {
		t.Errorf("another port: %s, want unknown", got)
	}
}

// namesFile says whether the index's error is knownhosts' with the file
// named, as knownhosts does not for a read error (a line too long).
func namesFile(ixErr, dbErr error) bool {
	ix, db := ixErr.Error(), dbErr.Error()
	return strings.HasPrefix(db, "bufio.Scanner: ") && strings.HasPrefix(ix, "knownhosts: ") && strings.HasSuffix(ix, ": "+db)
}

// With no folder for the files it hands knownhosts, the index hands it the
// known_hosts files themselves: the same answers, and no error.
func TestKnownIndexWithoutTempDir(t *testing.T) {
	a, b, ca := testEd25519(t), testEd25519(t), testEd25519(t)
	file := filepath.Join(t.TempDir(), "known_hosts")
	text := "*.lab " + string(ssh.MarshalAuthorizedKey(a)) + "gpu01 " + string(ssh.MarshalAuthorizedKey(b)) +
		"@cert-authority gpu0* " + string(ssh.MarshalAuthorizedKey(ca))
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	ix, err := loadKnownIndex([]string{file})
	if err != nil {
		t.Fatal(err)
	}
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 22}
	for address, want := range map[string]string{"x.lab:22": "ok", "gpu01:22": "changed", "gpu01:2222": "changed", "nowhere:22": "unknown"} {
		if got, _, _ := strings.Cut(verdict(ix.check(address, remote, a)), " "); got != want {
			t.Errorf("%s offering a: %s, want %s", address, got, want)
		}
	}
	if err := ix.check("gpu01:22", remote, b); err != nil {
		t.Errorf("gpu01 offering b: %v", err)
	}
	if got, want := ix.algorithms("gpu01:22"), []string{ssh.KeyAlgoED25519, ssh.CertAlgoED25519v01}; !slices.Equal(got, want) {
		t.Errorf("algorithms %v, want %v", got, want)
	}
}

// Where the system names open files (/dev/fd), knownhosts reads the lines
// the index hands it through the open file, which is gone from the
// temporary folder by then: no file put in its place there is read.
func TestKnownIndexTempFileGone(t *testing.T) {
	if _, err := os.Stat("/dev/fd/0"); err != nil {
		testenv.Need(t, "no /dev/fd: "+err.Error())
	}
	a := testEd25519(t)
	file := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(file, []byte("*.lab "+string(ssh.MarshalAuthorizedKey(a))+"bad line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	if _, err := loadKnownIndex([]string{file}); err == nil || !strings.Contains(err.Error(), file+":2:") {
		t.Errorf("error %v, want it to name %s:2", err, file)
	}
	if err := os.WriteFile(file, []byte("*.lab "+string(ssh.MarshalAuthorizedKey(a))), 0o600); err != nil {
		t.Fatal(err)
	}
	ix, err := loadKnownIndex([]string{file})
	if err != nil {
		t.Fatal(err)
	}
	for name := range ix.restFiles {
		if !strings.HasPrefix(name, "/dev/fd/") {
			t.Errorf("knownhosts read %s", name)
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("left in the temporary folder: %v", left)
	}
	if err := ix.check("x.lab:22", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 22}, a); err != nil {
		t.Error(err)
	}
}

// A typed nil remote address, off port 22 with a wildcard line on record,
// is an error and no panic (knownhosts.HostKeyDB panics on it).
func TestKnownIndexNilRemote(t *testing.T) {
	a := testEd25519(t)
	file := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(file, []byte("*.lab "+string(ssh.MarshalAuthorizedKey(a))), 0o600); err != nil {
		t.Fatal(err)
	}
	ix, err := loadKnownIndex([]string{file})
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.check("x.lab:2222", (*net.TCPAddr)(nil), a); err == nil {
		t.Error("accepted")
	}
}

// An error names the known_hosts file, even where the name of one file the
// index handed knownhosts begins that of another.
func TestKnownIndexRealNames(t *testing.T) {
	ix := &knownIndex{restFiles: map[string]string{"/tmp/gpumon-known_hosts-123": "/a", "/tmp/gpumon-known_hosts-1234": "/b"}}
	for range 20 { // the map's order changes
		if got, want := ix.realNames("knownhosts: /tmp/gpumon-known_hosts-1234:5: illegal base64 data at input byte 0"),
			"knownhosts: /b:5: illegal base64 data at input byte 0"; got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
}

// verdict is what a host-key check decided, in words a test can compare.
func verdict(err error) string {
	var ke *xknownhosts.KeyError
	var re *xknownhosts.RevokedError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &re):
		return fmt.Sprintf("revoked %s:%d", re.Revoked.Filename, re.Revoked.Line)
	case errors.As(err, &ke) && len(ke.Want) == 0:
		return "unknown"
	case errors.As(err, &ke):
		var at []string
		for _, w := range ke.Want {
			at = append(at, fmt.Sprintf("%s:%d", w.Filename, w.Line))
		}
		sort.Strings(at)
		return "changed " + strings.Join(at, " ")
	}
	return "error " + err.Error()
}

func testEd25519Signer(t testing.TB) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testEd25519(t testing.TB) ssh.PublicKey {
	t.Helper()
	return testEd25519Signer(t).PublicKey()
}

func testECDSA(t testing.TB) ssh.PublicKey {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func testHostCert(t testing.TB, ca ssh.Signer, key ssh.PublicKey, host string) *ssh.Certificate {
	t.Helper()
	c := &ssh.Certificate{Key: key, CertType: ssh.HostCert, ValidPrincipals: []string{host}, ValidBefore: ssh.CertTimeInfinity}
	if err := c.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	return c
}

// FuzzKnownIndex compares the index with knownhosts on any known_hosts text
// whose lines use two fixed keys and a certificate authority.
func FuzzKnownIndex(f *testing.F) {
	a, b, ca := seededSigner(f, 1).PublicKey(), seededSigner(f, 2).PublicKey(), seededSigner(f, 3)
	cert := testHostCert(f, ca, a, "gpu07")
	ka, kb, kca := string(ssh.MarshalAuthorizedKey(a)), string(ssh.MarshalAuthorizedKey(b)), string(ssh.MarshalAuthorizedKey(ca.PublicKey()))
	for _, seed := range []string{
		"gpu01 " + ka + "gpu01,gpu02 " + kb + "[gpu03]:2222 " + ka,
		xknownhosts.HashHostname("gpu01") + " " + ka + "gpu01 " + kb,
		"*.lab " + ka + "gpu0?,!gpu02 " + kb + "[gpu03]:2222 " + kb,
		"@cert-authority gpu0* " + kca + "@revoked * " + kb + "gpu01 " + kb,
		"gpu01 " + ka + "\n#\n\t gpu02\t" + kb + "[gpu04] " + ka + "gpu05 ssh-ed25519 x\n",
		"gpu01 ssh-rsa " + strings.Fields(ka)[1] + "\n",                              // a type that is not the key's: knownhosts refuses the file
		"\rgpu01 " + ka + "\u00a0gpu02 " + kb + "\vgpu04 " + ka + "gpu01\u00a0" + kb, // blanks knownhosts does not trim
		"gpu01 " + ka + "\x00*.lab " + kb + "\x00@revoked * " + ka,                   // three files
	} {
		f.Add(seed)
	}
	addresses := []string{"gpu01:22", "gpu02:22", "gpu03:2222", "gpu03:22", "gpu04:22", "gpu07:22", "x.lab:22", "x.lab:2222", "[::1]:22",
		"gpu01:2222", "[::1]:2222", "gpu01", ""}
	f.Fuzz(func(t *testing.T, text string) {
		// a NUL starts another file
		dir := t.TempDir()
		var files []string
		for i, part := range strings.SplitN(text, "\x00", 3) {
			files = append(files, filepath.Join(dir, fmt.Sprintf("known_hosts%d", i)))
			if err := os.WriteFile(files[i], []byte(part), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		compareWithKnownhosts(t, files, addresses, []ssh.PublicKey{a, b, cert, ca.PublicKey()},
			[]net.Addr{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 22}}, false)
	})
}

func bytes32(b byte) []byte {
	seed := make([]byte, ed25519.SeedSize)
	seed[0] = b
	return seed
}

// BenchmarkKnownHosts is one host's key checked against a fleet's
// known_hosts, as fetch does for every host it dials: plain lines (what
// ssh-keyscan and accept-new write) are looked up in the index; hashed
// ones (ssh-keyscan -H, HashKnownHosts yes) still cost a keyed hash per
// line, as in OpenSSH, so a fleet of N hashed hosts costs N² of them.
func BenchmarkKnownHosts(b *testing.B) {
	key := testEd25519(b)
	for _, bc := range []struct {
		name   string
		lines  int
		hashed bool
	}{
		{"plain/lines=10000", 10000, false},
		{"hashed/lines=1000", 1000, true},
		{"hashed/lines=10000", 10000, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var text strings.Builder
			for i := range bc.lines {
				host := fmt.Sprintf("gpu%05d", i)
				if bc.hashed {
					host = xknownhosts.HashHostname(host)
				}
				fmt.Fprintf(&text, "%s %s", host, ssh.MarshalAuthorizedKey(key))
			}
			ix, _ := indexOf(b, text.String())
			remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 22}
			i := 0
			for b.Loop() {
				address := fmt.Sprintf("gpu%05d:22", (i*7919)%bc.lines) // all over the file
				if err := ix.check(address, remote, key); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// FuzzKnownIndexLines compares the index with knownhosts on known_hosts
// files built from lines that mostly parse: each three bytes of input pick
// a marker, a host pattern, a key and the blanks around them, so that the
// fuzzer spends its time on what lines mean rather than on base64.
func FuzzKnownIndexLines(f *testing.F) {
	a, b, ca := seededSigner(f, 1).PublicKey(), seededSigner(f, 2).PublicKey(), seededSigner(f, 3)
	e := testECDSA(f)
	cert := testHostCert(f, ca, a, "gpu01")
	keys := []ssh.PublicKey{a, b, ca.PublicKey(), e}
	patterns := []string{"gpu01", "gpu01,gpu02", "[gpu01]:2222", "[gpu01]:22", "gpu0*", "*", "gpu0?", "!gpu01,*", "gpu01,!gpu02",
		xknownhosts.HashHostname("gpu01"), xknownhosts.HashHostname("[gpu01]:2222"), "[::1]", "::1", "[::1]:2222", ",",
		"gpu01,,gpu02", "[gpu01]:", "[gpu01]:022", "GPU01", "[gpu0*]:2222", "\vgpu01", "\v@cert-authority", "gpu02", "[gpu01",
		"gpu01]", "gpu01:2222", "*.lab", "x.lab", "!", "|1|x|y", "gpu01,gpu01", "gpu01,[gpu01]:22", "#*", "\r", "\r@cert-authority"}
	for _, seed := range [][]byte{
		{0, 0, 0}, {0, 0, 0, 5 << 3, 4, 1}, {0, 0, 0, 6, 0, 1}, {1, 0, 0, 0, 4, 1}, {0, 2, 0, 7, 5, 0}, {8, 9, 0, 0, 22, 1},
	} {
		f.Add(seed)
	}
	addresses := []string{"gpu01:22", "gpu02:22", "gpu01:2222", "gpu01:022", "gpu01:", "GPU01:22", "[::1]:22", "[::1]:2222",
		"x.lab:22", "x.lab:2222", "\v@cert-authority:22", "gpu01", ""}
	f.Fuzz(func(t *testing.T, data []byte) {
		var text strings.Builder
		for len(data) >= 3 {
			form, pattern, key := data[0], patterns[int(data[1])%len(patterns)], keys[int(data[2])%len(keys)]
			data = data[3:]
			if form&0x80 != 0 {
				text.WriteString("\x00") // another file
			}
			if form&0x40 != 0 {
				text.WriteString(" \t")
			}
			switch form & 7 {
			case 5:
				text.WriteString("@cert-authority ")
			case 6:
				text.WriteString("@revoked ")
			case 7:
				text.WriteString("#")
			}
			sep := " "
			if form&0x20 != 0 {
				sep = "\t"
			}
			text.WriteString(pattern + sep + key.Type() + sep + base64.StdEncoding.EncodeToString(key.Marshal()))
			switch form >> 3 & 3 {
			case 0:
				text.WriteString("\n")
			case 1:
				text.WriteString(" comment\r\n")
			case 2:
				text.WriteString("\r\r\n")
			case 3:
				text.WriteString("\n\r\n")
			}
		}
		dir := t.TempDir()
		var files []string
		for i, part := range strings.Split(text.String(), "\x00") {
			files = append(files, filepath.Join(dir, fmt.Sprintf("known_hosts%d", i)))
			if err := os.WriteFile(files[i], []byte(part), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		compareWithKnownhosts(t, files, addresses, append(keys, cert),
			[]net.Addr{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2222}, &net.TCPAddr{IP: net.IPv6loopback, Port: 22}, &net.UnixAddr{Name: "/s", Net: "unix"}}, true)
	})
}

// indexOf loads an index of text, written to a known_hosts file of its own.
func indexOf(tb testing.TB, text string) (*knownIndex, string) {
	tb.Helper()
	file := filepath.Join(tb.TempDir(), "known_hosts")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		tb.Fatal(err)
	}
	ix, err := loadKnownIndex([]string{file})
	if err != nil {
		tb.Fatal(err)
	}
	return ix, file
}

// seededSigner is an Ed25519 key made from one byte: the same in every run,
// so that fuzz inputs holding its public key keep meaning it.
func seededSigner(tb testing.TB, seed byte) ssh.Signer {
	tb.Helper()
	s, err := ssh.NewSignerFromKey(ed25519.NewKeyFromSeed(bytes32(seed)))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// compareWithKnownhosts fails t where the index, loading files, says
// anything other than knownhosts: whether they load (with sameErr, the
// same error), the algorithms for each address, and the verdict on each
// key offered to each address from each remote address.
func compareWithKnownhosts(t *testing.T, files, addresses []string, keys []ssh.PublicKey, remotes []net.Addr, sameErr bool) {
	t.Helper()
	db, dbErr := knownhosts.NewDB(files...)
	ix, ixErr := loadKnownIndex(files)
	if (dbErr == nil) != (ixErr == nil) || sameErr && dbErr != nil && dbErr.Error() != ixErr.Error() {
		t.Fatalf("loading: knownhosts says %v, the index %v", dbErr, ixErr)
	}
	if dbErr != nil {
		return
	}
	callback := db.HostKeyCallback()
	for _, address := range addresses {
		if diff := cmp.Diff(db.HostKeyAlgorithms(address), ix.algorithms(address)); diff != "" {
			t.Errorf("%q: algorithms (-knownhosts +index):\n%s", address, diff)
		}
		for _, key := range keys {
			for _, remote := range remotes {
				if want, got := verdict(callback(address, remote, key)), verdict(ix.check(address, remote, key)); want != got {
					t.Errorf("%q from %v offering %s:\nknownhosts: %s\nindex:      %s", address, remote, key.Type(), want, got)
				}
			}
		}
	}
}
