package deploytest

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/render"
	"github.com/gpumon/gpumon/internal/testenv"
)

const nginxBin = "/usr/sbin/nginx"

// served is a file render wrote and the docs' blocks serve: its URL path,
// its bytes and the Content-Type nginx must give it.
type served struct {
	path, contentType string
	body              []byte
}

// renderSite renders a fleet of 250 hosts (past 200: group pages) into a
// web folder nginx's workers may read, as render's own folder is, and
// returns the folder and the files the docs list. page-state.json is
// render's when it writes one, else a stand-in.
func renderSite(t *testing.T) (string, []served) {
	t.Helper()
	dir := readableTempDir(t)
	www := filepath.Join(dir, "www")
	if err := os.Mkdir(www, 0o755); err != nil {
		t.Fatal(err)
	}
	csv := filepath.Join(dir, "load_data.csv")
	if err := loaddata.WriteFile(csv, fleet(250)); err != nil {
		t.Fatal(err)
	}
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[history]\ndb =\n"), 0o644)
	var stdout, stderr bytes.Buffer
	args := []string{"-c", ini, "-i", csv, "-o", filepath.Join(www, "index.html")}
	if err := render.Main(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("render: %v\n%s", err, stderr.String())
	}
	state := filepath.Join(www, render.PageState)
	if _, err := os.Stat(state); os.IsNotExist(err) {
		os.WriteFile(state, []byte(`{"stand_in":"page-state.json is not written yet"}`+"\n"), 0o644)
	}
	groups, _ := filepath.Glob(filepath.Join(www, "groups", "*.html"))
	if len(groups) == 0 {
		t.Fatal("render wrote no group page for 250 hosts")
	}
	html, js, text := "text/html; charset=utf-8", "application/json", "text/plain; charset=utf-8"
	var files []served
	for _, f := range []struct{ path, file, contentType string }{
		{"/", "index.html", html},
		{"/index.html", "index.html", html},
		{"/groups/" + filepath.Base(groups[0]), "groups/" + filepath.Base(groups[0]), html},
		{"/" + render.PageState, render.PageState, js},
		{"/status.json", "status.json", js},
		{"/metrics.prom", "metrics.prom", text},
		{"/index.txt", "index.txt", text},
		{"/free.txt", "free.txt", text},
	} {
		body, err := os.ReadFile(filepath.Join(www, f.file))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, served{f.path, f.contentType, body})
	}
	// what must not be served: a temporary file, the CSV, a group page's
	// temporary file
	for _, name := range []string{".index.html123", "load_data.csv", "groups/.gpu.html123"} {
		os.WriteFile(filepath.Join(www, name), []byte("not for the web"), 0o644)
	}
	return www, files
}

// notServed are paths the blocks answer 404, files there or not.
var notServed = []string{"/load_data.csv", "/.index.html123", "/groups/.gpu.html123", "/Index.html", "//status.json.x", "/config.ini"}

// fleet is hosts × 2 GPUs, the first of each busy.
func fleet(hosts int) []loaddata.Row {
	ts := time.Now().UTC().Format(time.RFC3339)
	var rows []loaddata.Row
	for h := range hosts {
		for g := range int64(2) {
			r := loaddata.Row{Timestamp: ts, Host: fmt.Sprintf("gpu%03d", h), HostStatus: hoststatus.OK,
				GPUIndex: loaddata.IntOf(g), GPUName: "NVIDIA A100-SXM4-80GB", GPUUtilPct: loaddata.Num(0),
				MemUsedMiB: loaddata.Num(4), MemTotalMiB: loaddata.Num(81920), TempC: loaddata.Num(30)}
			if g == 0 {
				r.GPUUtilPct, r.MemUsedMiB = loaddata.Num(97), loaddata.Num(60000)
				r.PID, r.User, r.Command, r.ProcessMemMiB = loaddata.IntOf(1000+int64(h)), "alice", "python train.py", loaddata.Num(59000)
			}
			rows = append(rows, r)
		}
	}
	return rows
}

// readableTempDir is a t.TempDir that nginx's workers (nobody) may enter.
func readableTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// docBlock is the fenced nginx block after docs/deployment.md's line
// "<!-- deploytest: NAME (...) -->".
func docBlock(t *testing.T, name string) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/deployment.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "<!-- deploytest: "+name+" (")
	if !ok {
		t.Fatalf("docs/deployment.md has no marker %q", "<!-- deploytest: "+name+" (")
	}
	_, after, _ = strings.Cut(after, "\n")
	block, ok := strings.CutPrefix(after, "```nginx\n")
	if !ok {
		t.Fatalf("docs/deployment.md: the %s marker is not followed by a ```nginx block", name)
	}
	block, _, ok = strings.Cut(block, "\n```\n")
	if !ok {
		t.Fatalf("docs/deployment.md: the %s block does not end", name)
	}
	return block
}

// replace replaces in block each old with its new, failing when old is not
// there n times: the docs changed and the test must follow.
func replace(t *testing.T, name, block string, n int, old, new string) string {
	t.Helper()
	if got := strings.Count(block, old); got != n {
		t.Fatalf("docs/deployment.md's %s block has %q %d times, want %d: update the test with the docs\n%s", name, old, got, n, block)
	}
	return strings.ReplaceAll(block, old, new)
}

// startNginx runs nginx as root, its workers as nobody, with the server
// blocks servers in a prefix of its own, and waits until ports answer;
// it stops with the test.
func startNginx(t *testing.T, servers string, ports ...int) {
	t.Helper()
	testenv.NeedRoot(t)
	if _, err := os.Stat(nginxBin); err != nil {
		testenv.Need(t, "needs nginx (apt-get install nginx-light)")
	}
	prefix := readableTempDir(t)
	conf := filepath.Join(prefix, "nginx.conf")
	var temps strings.Builder
	for _, kind := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&temps, "    %s_temp_path %s;\n", kind, filepath.Join(prefix, kind))
	}
	os.WriteFile(conf, []byte(fmt.Sprintf(`user nobody nogroup;
daemon off;
worker_processes 1;
pid %s;
error_log %s;
events { worker_connections 64; }
http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log off;
%s
%s
}
`, filepath.Join(prefix, "nginx.pid"), filepath.Join(prefix, "error.log"), temps.String(), servers)), 0o644)
	if out, err := exec.Command(nginxBin, "-t", "-p", prefix, "-c", conf).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s\n%s", err, out, servers)
	}
	cmd := exec.Command(nginxBin, "-p", prefix, "-c", conf)
	var out testenv.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { stopGroup(t, cmd.Process.Pid, exited) })
	for _, port := range ports {
		waitPort(t, port, exited, &out)
	}
}

// stopGroup stops nginx's process group (its master and workers, ours
// alone: Setpgid), killing it if it does not stop in time.
func stopGroup(t *testing.T, pgid int, exited chan error) {
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Errorf("nginx did not stop on SIGTERM in 10s: killed")
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-exited
	}
}

// waitPort returns once 127.0.0.1:port takes a connection, and fails the
// test if nginx exits first or 10 s pass.
func waitPort(t *testing.T, port int, exited chan error, out *testenv.SyncBuffer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	retry := time.NewTicker(10 * time.Millisecond)
	defer retry.Stop()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Until(deadline))
		if err == nil {
			c.Close()
			return
		}
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			t.Fatalf("nginx exited (%v) before listening on %s:\n%s", err, addr, out.String())
		case <-retry.C:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx does not listen on %s after 10s: %v\n%s", addr, err, out.String())
		}
	}
}

// freePort is a port on 127.0.0.1 that nobody listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// tlsFiles writes a self-signed certificate for 127.0.0.1 as certbot
// names its files (fullchain.pem, privkey.pem) in a folder nginx reads,
// and returns the folder and a client that trusts it and follows no
// redirect.
func tlsFiles(t *testing.T) (string, *http.Client) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gpus.example.org"},
		DNSNames: []string{"gpus.example.org"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := readableTempDir(t)
	os.WriteFile(filepath.Join(dir, "fullchain.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(filepath.Join(dir, "privkey.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return dir, newClient(&tls.Config{RootCAs: pool})
}

// newClient is an HTTP client that asks for no compression unless told,
// and follows no redirect.
func newClient(tc *tls.Config) *http.Client {
	return &http.Client{
		Transport:     &http.Transport{TLSClientConfig: tc, DisableCompression: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       10 * time.Second,
	}
}

// get fetches url with the given headers and basic auth (user "" for
// none), and returns the response with its whole body.
func get(t *testing.T, c *http.Client, url string, header http.Header, user, password string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// checkServed checks f as served at base: 200, its bytes, its type,
// no-cache, and the same bytes gzipped to a client that asks.
func checkServed(t *testing.T, c *http.Client, base string, f served, header http.Header, user, password string) {
	t.Helper()
	resp, body := get(t, c, base+f.path, header, user, password)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, f.body) {
		t.Fatalf("%s: %s, %d bytes, want 200 and the file's %d bytes", f.path, resp.Status, len(body), len(f.body))
	}
	if got := resp.Header.Get("Content-Type"); got != f.contentType {
		t.Errorf("%s: Content-Type %q, want %q", f.path, got, f.contentType)
	}
	if got := resp.Header.Get("Cache-Control"); got != "no-cache" {
		t.Errorf("%s: Cache-Control %q, want no-cache", f.path, got)
	}
	zh := header.Clone()
	if zh == nil {
		zh = http.Header{}
	}
	zh.Set("Accept-Encoding", "gzip")
	resp, body = get(t, c, base+f.path, zh, user, password)
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("%s: Content-Encoding %q to a client that accepts gzip", f.path, resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if plain, err := io.ReadAll(zr); err != nil || !bytes.Equal(plain, f.body) {
		t.Errorf("%s gzipped: %v, %d bytes unzipped, want the file's %d", f.path, err, len(plain), len(f.body))
	}
}

// The block of "nginx" serves every file render writes, with its type,
// gzipped, not cached without asking; nothing else.
func TestNginxServesRenderFiles(t *testing.T) {
	www, files := renderSite(t)
	port := freePort(t)
	block := docBlock(t, "nginx")
	block = replace(t, "nginx", block, 1, "listen 80;", fmt.Sprintf("listen 127.0.0.1:%d;", port))
	block = replace(t, "nginx", block, 1, "root /var/www/gpumon;", "root "+www+";")
	startNginx(t, block, port)
	c, base := newClient(nil), fmt.Sprintf("http://127.0.0.1:%d", port)
	for _, f := range files {
		t.Run(f.path, func(t *testing.T) { checkServed(t, c, base, f, nil, "", "") })
	}
	for _, p := range notServed {
		if resp, _ := get(t, c, base+p, nil, "", ""); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %s, want 404", p, resp.Status)
		}
	}
}

// htpasswd makes the user file as the docs do (openssl passwd -6), mode
// 0640, of the workers' group, and returns its path.
func htpasswd(t *testing.T, user, password string) string {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		testenv.Need(t, "needs openssl (apt-get install openssl)")
	}
	cmd := exec.Command("openssl", "passwd", "-6", "-stdin")
	cmd.Stdin = strings.NewReader(password + "\n")
	hash, err := cmd.Output()
	if err != nil || !strings.HasPrefix(string(hash), "$6$") {
		t.Fatalf("openssl passwd -6: %v %q", err, hash)
	}
	path := filepath.Join(readableTempDir(t), "gpumon.htpasswd")
	if err := os.WriteFile(path, []byte(user+":"+strings.TrimSpace(string(hash))+"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, 0, 65534); err != nil { // root:nogroup, as root:www-data in the docs
		t.Fatal(err)
	}
	return path
}

// Behind basic auth, every file is 401 without the name and password and
// with a wrong one, and itself with the right one.
func TestNginxBasicAuth(t *testing.T) {
	www, files := renderSite(t)
	users := htpasswd(t, "alice", "s3cret pass")
	certs, c := tlsFiles(t)
	port := freePort(t)
	const name = "nginx basic auth"
	block := docBlock(t, name)
	block = replace(t, name, block, 1, "listen 443 ssl;", fmt.Sprintf("listen 127.0.0.1:%d ssl;", port))
	block = replace(t, name, block, 1, "root /var/www/gpumon;", "root "+www+";")
	block = replace(t, name, block, 2, "/etc/letsencrypt/live/gpus.example.org/", certs+"/")
	block = replace(t, name, block, 1, "/etc/nginx/gpumon.htpasswd", users)
	startNginx(t, block, port)
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	for _, f := range files {
		t.Run(f.path, func(t *testing.T) {
			for _, login := range [][2]string{{"", ""}, {"alice", "wrong"}, {"alice", "s3cret"}, {"bob", "s3cret pass"}} {
				resp, body := get(t, c, base+f.path, nil, login[0], login[1])
				if resp.StatusCode != http.StatusUnauthorized || bytes.Contains(body, f.body[:min(len(f.body), 64)]) {
					t.Errorf("as %q/%q: %s, want 401 and not the file", login[0], login[1], resp.Status)
				}
				if got := resp.Header.Get("WWW-Authenticate"); got != `Basic realm="GPU status"` {
					t.Errorf("as %q: WWW-Authenticate %q", login[0], got)
				}
			}
			checkServed(t, c, base, f, nil, "alice", "s3cret pass")
		})
	}
}

// standInProxy plays oauth2-proxy for nginx: /oauth2/auth is 202 for a
// request with its session cookie, else 401; /oauth2/start is its sign-in.
func standInProxy(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/oauth2/auth":
			if c, err := r.Cookie("_oauth2_proxy"); err == nil && c.Value == "signed-in" {
				w.WriteHeader(http.StatusAccepted)
				return
			}
			w.WriteHeader(http.StatusUnauthorized)
		case "/oauth2/start":
			fmt.Fprintf(w, "stand-in sign-in, then back to %s", r.URL.Query().Get("rd"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// Behind the OAuth2 proxy, a request without a session is sent to sign in
// and back to what it asked for; with one it gets the file.
func TestNginxOAuth2(t *testing.T) {
	www, files := renderSite(t)
	certs, c := tlsFiles(t)
	port := freePort(t)
	const name = "nginx oauth2"
	block := docBlock(t, name)
	block = replace(t, name, block, 1, "listen 443 ssl;", fmt.Sprintf("listen 127.0.0.1:%d ssl;", port))
	block = replace(t, name, block, 1, "root /var/www/gpumon;", "root "+www+";")
	block = replace(t, name, block, 2, "/etc/letsencrypt/live/gpus.example.org/", certs+"/")
	block = replace(t, name, block, 2, "127.0.0.1:4180", standInProxy(t))
	startNginx(t, block, port)
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	session := http.Header{"Cookie": {"_oauth2_proxy=signed-in"}}
	for _, f := range files {
		t.Run(f.path, func(t *testing.T) {
			for _, cookie := range []string{"", "_oauth2_proxy=forged"} {
				resp, _ := get(t, c, base+f.path, http.Header{"Cookie": {cookie}}, "", "")
				if want := "/oauth2/start?rd=" + f.path; resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != base+want && resp.Header.Get("Location") != want {
					t.Errorf("cookie %q: %s to %q, want 302 to %s", cookie, resp.Status, resp.Header.Get("Location"), want)
				}
			}
			checkServed(t, c, base, f, session, "", "")
		})
	}
	resp, body := get(t, c, base+"/oauth2/start?rd=/free.txt", nil, "", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "back to /free.txt") {
		t.Errorf("/oauth2/start: %s %q, want the proxy's sign-in", resp.Status, body)
	}
}

// README's nginx block is the docs' (the one tested above), so that
// whoever follows README gets every file served as it is tested.
func TestReadmeNginxBlock(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```nginx\n")
	if !ok {
		t.Fatal("README.md has no ```nginx block")
	}
	block, _, _ = strings.Cut(block, "\n```\n")
	if diff := cmp.Diff(docBlock(t, "nginx"), block); diff != "" {
		t.Errorf("README.md's nginx block differs from docs/deployment.md's (-docs +README):\n%s", diff)
	}
}
