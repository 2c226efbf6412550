package simfleet_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/attrib"
	"github.com/gpumon/gpumon/internal/captures"
	"github.com/gpumon/gpumon/internal/nvsmi"
	"github.com/gpumon/gpumon/internal/probe"
	"github.com/gpumon/gpumon/internal/rocm"
	"github.com/gpumon/gpumon/internal/simfleet"
	"github.com/gpumon/gpumon/internal/testenv"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// client dials fleet hosts the way fetch does: with the written key and a
// host key check against the written known_hosts.
type client struct {
	signer ssh.Signer
	hkcb   ssh.HostKeyCallback
	hosts  map[string]simfleet.HostInfo
}

func newClient(tb testing.TB, f *simfleet.Fleet) *client {
	tb.Helper()
	cf, err := f.WriteClientFiles(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	pem, err := os.ReadFile(cf.Key)
	if err != nil {
		tb.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(pem)
	if err != nil {
		tb.Fatal(err)
	}
	hkcb, err := knownhosts.New(cf.KnownHosts)
	if err != nil {
		tb.Fatal(err)
	}
	c := &client{signer: signer, hkcb: hkcb, hosts: map[string]simfleet.HostInfo{}}
	for _, h := range f.Hosts() {
		c.hosts[h.Name] = h
	}
	return c
}

func (c *client) dial(name string, timeout time.Duration) (*ssh.Client, error) {
	h := c.hosts[name]
	return ssh.Dial("tcp", h.Addr(), &ssh.ClientConfig{
		User:            simfleet.User,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(c.signer)},
		HostKeyCallback: c.hkcb,
		Timeout:         timeout,
	})
}

// probeHost runs req's script on the host, as fetch does, and parses the answer.
func (c *client) probeHost(name string, req probe.Request, timeout time.Duration) (probe.Output, error) {
	conn, err := c.dial(name, timeout)
	if err != nil {
		return probe.Output{}, err
	}
	defer conn.Close()
	s, err := conn.NewSession()
	if err != nil {
		return probe.Output{}, err
	}
	defer s.Close()
	var out bytes.Buffer
	s.Stdin = strings.NewReader(req.Script())
	s.Stdout = &out
	done := make(chan error, 1)
	go func() { done <- s.Run(probe.Command) }()
	select {
	case err = <-done:
	case <-time.After(timeout):
		conn.Close()
		<-done // the session's copy goroutines are done with out
		err = errors.New("timed out")
	}
	return probe.ParseOutput(req.Nonce, out.Bytes()), err
}

func testSpecs() []simfleet.HostSpec {
	procs := []simfleet.Process{
		{PID: 4242, User: "alice", Command: "python train.py --lr 0.1", GPU: 0, MemMiB: 30000, ElapsedS: 120},
		{PID: 4242, User: "alice", Command: "python train.py --lr 0.1", GPU: 1, MemMiB: 29000, ElapsedS: 120},
		{PID: 777, User: "bob", Command: "/opt/my tools/run,v2 --a,b", GPU: 3, MemMiB: 1000, ElapsedS: 5, Name: "/opt/my tools/run,v2"},
		{PID: 1234567, User: "a-very-long-user-name-of-forty-characters", Command: "sleep 100", GPU: 2, MemMiB: 10},
	}
	specs := []simfleet.HostSpec{
		{Name: "ok", Capture: "h200", GPUs: 4, Processes: procs},
		{Name: "mig", Capture: "h100-mig", State: "idle", GPUs: 2},
	}
	for _, f := range simfleet.Failures() {
		specs = append(specs, simfleet.HostSpec{Name: strings.ToLower(f.String()), Capture: "h100-mig", GPUs: 4, Failure: f,
			Processes: []simfleet.Process{{PID: 99, User: "carol", Command: "x", GPU: 0, MemMiB: 1}}})
	}
	return specs
}

func TestFleet(t *testing.T) {
	f := testenv.StartFleet(t, testSpecs())
	c := newClient(t, f)
	std := probe.NewRequest(1)
	wantHeader := "index, uuid, name, pci.bus_id, utilization.gpu [%], utilization.memory [%], memory.used [MiB], memory.total [MiB], temperature.gpu, power.draw [W], power.limit [W], fan.speed [%]"

	t.Run("healthy", func(t *testing.T) {
		t.Parallel()
		o, err := c.probeHost("ok", std, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !o.Complete || !o.Has("gpus") || !o.Has("apps") || !o.Has("ps") || !o.Has("host") {
			t.Fatalf("sections missing: %+v", o)
		}
		gpus := o.Sections["gpus"]
		lines := strings.Split(strings.TrimRight(string(gpus.Body), "\n"), "\n")
		if lines[0] != wantHeader {
			t.Errorf("gpus header\n got %s\nwant %s", lines[0], wantHeader)
		}
		if len(lines) != 5 || gpus.ExitCode != 0 {
			t.Fatalf("gpus: exit %d, %d lines:\n%s", gpus.ExitCode, len(lines), gpus.Body)
		}
		rep, err := nvsmi.ParseGPUs(gpus.Body)
		if err != nil || len(rep.GPUs) != 4 || len(rep.Skipped) > 0 {
			t.Fatalf("ParseGPUs: %v %+v", err, rep)
		}
		uuids := map[string]int{}
		for i, g := range rep.GPUs {
			if g.Index != i || g.Name != "NVIDIA H200" || !strings.HasPrefix(g.UUID, "GPU-") || g.UUID == "GPU-00000000-0000-0000-0000-000000000000" {
				t.Errorf("GPU %d: %+v", i, g)
			}
			if g.UUID != f.GPUUUID("ok", i) {
				t.Errorf("GPU %d uuid %s, fleet says %s", i, g.UUID, f.GPUUUID("ok", i))
			}
			uuids[g.UUID] = i
		}
		if len(uuids) != 4 {
			t.Errorf("uuids not distinct: %v", uuids)
		}
		if v := rep.GPUs[0].MemUsedMiB; !v.Valid || v.Value != 30000 {
			t.Errorf("GPU 0 memory.used = %v, want 30000 (its process)", v)
		}
		if strings.Contains(string(gpus.Body), " MiB") || strings.Contains(string(gpus.Body), " W,") {
			t.Errorf("nounits answer has units:\n%s", gpus.Body)
		}

		apps := o.Sections["apps"]
		prep, err := nvsmi.ParseProcesses(apps.Body)
		if err != nil || len(prep.Processes) != 4 {
			t.Fatalf("ParseProcesses: %v %+v\n%s", err, prep, apps.Body)
		}
		if bytes.Contains(apps.Body, []byte("python")) || bytes.Contains(apps.Body, []byte("/opt/my tools")) {
			t.Errorf("process names in the answer to a query without process_name:\n%s", apps.Body)
		}
		for _, p := range prep.Processes {
			if _, ok := uuids[p.GPUUUID]; !ok {
				t.Errorf("process %d on unknown GPU %s", p.PID, p.GPUUUID)
			}
		}
		ps := string(o.Sections["ps"].Body)
		for _, want := range []string{
			" 4242 alice                                120 python train.py --lr 0.1\n",
			"  777 bob                                    5 /opt/my tools/run,v2 --a,b\n",
			"1234567 a-very-long-user-name-of-forty-+       0 sleep 100\n",
		} {
			if !strings.Contains(ps, want) {
				t.Errorf("ps lacks %q:\n%s", want, ps)
			}
		}
		if strings.Count(ps, "4242") != 1 {
			t.Errorf("pid on two GPUs listed twice by ps:\n%s", ps)
		}
		host := string(o.Sections["host"].Body)
		if !strings.Contains(host, "cpus 64\nload ") || !strings.Contains(host, "mem_total_kib 536870912\n") {
			t.Errorf("host section:\n%s", host)
		}
	})

	t.Run("mig", func(t *testing.T) {
		t.Parallel()
		o, err := c.probeHost("mig", std, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		body := string(o.Sections["gpus"].Body)
		if !strings.Contains(body, "NVIDIA H100 80GB HBM3, 00000000:2A:00.0, [N/A], [N/A], 59, 81559,") {
			t.Errorf("MIG GPU row:\n%s", body)
		}
		if o.Has("ps") {
			t.Errorf("ps section without GPU processes")
		}
	})

	t.Run("custom fields", func(t *testing.T) {
		t.Parallel()
		req := probe.Request{Nonce: "n0nce", GPUFields: []string{"gpu_name", "memory.free", "count", "timestamp"},
			AppFields: []string{"gpu_bus_id", "used_memory", "name", "pid"}, NVTimeout: 1}
		o, err := c.probeHost("ok", req, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(o.Sections["gpus"].Body), "\n")
		if lines[0] != "name, memory.free [MiB], count, timestamp" || !strings.HasPrefix(lines[1], "NVIDIA H200, ") || !strings.Contains(lines[1], ", 4, ") {
			t.Errorf("custom gpus:\n%s", o.Sections["gpus"].Body)
		}
		apps := strings.Split(string(o.Sections["apps"].Body), "\n")
		if apps[0] != "gpu_bus_id, used_memory [MiB], name, pid" || !strings.HasPrefix(apps[1], "00000000:18:00.0, 30000, python, 4242") {
			t.Errorf("custom apps:\n%s", o.Sections["apps"].Body)
		}
		if !strings.Contains(string(o.Sections["apps"].Body), ", /opt/my tools/run?v2, 777\n") {
			t.Errorf("process name with a comma not printed with '?':\n%s", o.Sections["apps"].Body)
		}
		if o.Has("ps") {
			t.Errorf("ps run although pid is not the first apps field (the script reads the first)")
		}

		req = probe.Request{Nonce: "n0nce2", GPUFields: []string{"index", "no.such.field"}, AppFields: []string{"pid", "bogus"}}
		o, err = c.probeHost("ok", req, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if s := o.Sections["gpus"]; s.ExitCode != 2 || string(s.Body) != "Field \"no.such.field\" is not a valid field to query.\n" {
			t.Errorf("bad gpu field: exit %d %q", s.ExitCode, s.Body)
		}
		if s := o.Sections["apps"]; s.ExitCode != 2 || !strings.Contains(string(s.Body), `"bogus"`) {
			t.Errorf("bad app field: exit %d %q", s.ExitCode, s.Body)
		}
	})

	t.Run("Refuse", func(t *testing.T) {
		t.Parallel()
		_, err := c.dial("refuse", 5*time.Second)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("got %v, want connection refused", err)
		}
	})

	t.Run("Silent", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		// ssh.Dial's Timeout covers the TCP connect only: the handshake
		// needs a deadline on the conn
		conn, err := net.DialTimeout("tcp", c.hosts["silent"].Addr(), time.Second)
		if err != nil {
			t.Fatalf("TCP connect to a silent host: %v", err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(300 * time.Millisecond))
		_, _, _, err = ssh.NewClientConn(conn, "silent", &ssh.ClientConfig{User: "u", HostKeyCallback: c.hkcb})
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("handshake with a silent host: %v, want a timeout", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("took %v", d)
		}
	})

	t.Run("AuthReject", func(t *testing.T) {
		t.Parallel()
		_, err := c.dial("authreject", 5*time.Second)
		if err == nil || !strings.Contains(err.Error(), "unable to authenticate") {
			t.Fatalf("got %v, want an authentication error", err)
		}
	})

	t.Run("WrongHostKey", func(t *testing.T) {
		t.Parallel()
		_, err := c.dial("wronghostkey", 5*time.Second)
		var ke *knownhosts.KeyError
		if !errors.As(err, &ke) || len(ke.Want) == 0 {
			t.Fatalf("got %v, want a host key mismatch", err)
		}
		h := c.hosts["wronghostkey"]
		if bytes.Equal(ke.Want[0].Key.Marshal(), h.HostKey.Marshal()) {
			t.Errorf("known_hosts holds the real key")
		}
	})

	t.Run("DropMidOutput", func(t *testing.T) {
		t.Parallel()
		o, err := c.probeHost("dropmidoutput", std, 10*time.Second)
		if err == nil {
			t.Errorf("session ended cleanly")
		}
		if o.Complete || o.Has("gpus") {
			t.Errorf("output complete=%v gpus=%v after a dropped connection", o.Complete, o.Has("gpus"))
		}
	})

	t.Run("HangNvidiaSMI", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		o, err := c.probeHost("hangnvidiasmi", std, 10*time.Second)
		d := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if d < 900*time.Millisecond || d > 5*time.Second {
			t.Errorf("answered after %v, want about NVTimeout (1s)", d)
		}
		if s, ok := o.Sections["gpus"]; !ok || s.ExitCode != 124 || len(bytes.TrimSpace(s.Body)) != 0 {
			t.Errorf("gpus: %+v", o.Sections["gpus"])
		}
		if o.Has("apps") || o.Has("ps") || !o.Has("host") || !o.Complete {
			t.Errorf("sections after a timeout: %+v", o)
		}
	})

	t.Run("HangForever", func(t *testing.T) {
		t.Parallel()
		o, err := c.probeHost("hangforever", std, 500*time.Millisecond)
		if err == nil || len(o.Sections) != 0 || o.Complete {
			t.Errorf("a hung host answered: %v %+v", err, o)
		}
	})

	failing := map[string]struct {
		code int
		msg  string
	}{
		"drivernotloaded": {9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n"},
		"nodevices":       {6, "No devices were found\n"},
	}
	for name, want := range failing {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o, err := c.probeHost(name, std, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, sec := range []string{"gpus", "apps"} {
				if s := o.Sections[sec]; s.ExitCode != want.code || string(s.Body) != want.msg {
					t.Errorf("%s: exit %d %q", sec, s.ExitCode, s.Body)
				}
			}
			if o.Has("ps") || !o.Has("host") || !o.Complete {
				t.Errorf("sections: %+v", o)
			}
		})
	}

	t.Run("GPULost", func(t *testing.T) {
		t.Parallel()
		o, err := c.probeHost("gpulost", std, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		s := o.Sections["gpus"]
		lines := strings.Split(strings.TrimRight(string(s.Body), "\n"), "\n")
		if s.ExitCode != 15 || len(lines) != 5 || lines[3] != "Unable to determine the device handle for GPU 0000:3a:00.0: GPU is lost.  Reboot the system to recover this GPU" {
			t.Fatalf("exit %d:\n%s", s.ExitCode, s.Body)
		}
		rep, err := nvsmi.ParseGPUs(s.Body)
		if err != nil || len(rep.GPUs) != 3 || len(rep.Faults) != 1 {
			t.Errorf("ParseGPUs: %v %+v", err, rep)
		}
	})
}

func TestClientFiles(t *testing.T) {
	f := testenv.StartFleet(t, []simfleet.HostSpec{{Name: "a"}, {Name: "b", Failure: simfleet.WrongHostKey}})
	dir := filepath.Join(t.TempDir(), "sub")
	cf, err := f.WriteClientFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	hosts := f.Hosts()
	if hosts[0].Host == hosts[1].Host {
		t.Errorf("hosts share address %s", hosts[0].Host)
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if fi, err := os.Stat(cf.Key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v", fi.Mode(), err)
	}
	if !strings.HasPrefix(read(cf.Key), "-----BEGIN OPENSSH PRIVATE KEY-----\n") {
		t.Errorf("key not in OpenSSH format")
	}
	wantCfg := fmt.Sprintf("Host a\n  HostName %s\n  Port %d\n  User gpumon\n  IdentityFile %s\n\nHost b\n  HostName %s\n  Port %d\n  User gpumon\n  IdentityFile %s\n\n",
		hosts[0].Host, hosts[0].Port, cf.Key, hosts[1].Host, hosts[1].Port, cf.Key)
	if got := read(cf.SSHConfig); got != wantCfg {
		t.Errorf("ssh_config:\n%s\nwant:\n%s", got, wantCfg)
	}
	kh := strings.Split(strings.TrimSpace(read(cf.KnownHosts)), "\n")
	if len(kh) != 2 {
		t.Fatalf("known_hosts: %q", kh)
	}
	for i, line := range kh {
		_, hs, key, _, _, err := ssh.ParseKnownHosts([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("[%s]:%d", hosts[i].Host, hosts[i].Port); len(hs) != 1 || hs[0] != want {
			t.Errorf("known_hosts line %d names %v, want %s", i, hs, want)
		}
		real := bytes.Equal(key.Marshal(), hosts[i].HostKey.Marshal())
		if real != (i == 0) {
			t.Errorf("known_hosts line %d: real key %v", i, real)
		}
	}
	wantINI := fmt.Sprintf("[common]\nuser = gpumon\nhosts = a, b\nkey_filename = %s\nssh_config = %s\nknown_hosts = %s\ntimeout = 5\n",
		cf.Key, cf.SSHConfig, cf.KnownHosts)
	if got := read(cf.ConfigINI); got != wantINI {
		t.Errorf("config.ini:\n%s\nwant:\n%s", got, wantINI)
	}
}

// Every capture, the Windows and old-driver ones too, answers the standard
// probe with something the parser takes whole.
func TestEveryCapture(t *testing.T) {
	var specs []simfleet.HostSpec
	for i, n := range captures.Names() {
		for _, st := range []string{"idle", "load"} {
			specs = append(specs, simfleet.HostSpec{Name: fmt.Sprintf("%s-%s", n, st), Capture: n, State: st, GPUs: 1 + i%3,
				Processes: []simfleet.Process{{PID: 100 + i, User: "dave", Command: "prog --x", GPU: 0, MemMiB: 100}}})
		}
	}
	f := testenv.StartFleet(t, specs)
	c := newClient(t, f)
	for _, s := range specs {
		o, err := c.probeHost(s.Name, probe.NewRequest(1), 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		rep, err := nvsmi.ParseGPUs(o.Sections["gpus"].Body)
		if err != nil || len(rep.GPUs) != s.GPUs || len(rep.Skipped) > 0 {
			t.Errorf("%s: ParseGPUs: %v %+v\n%s", s.Name, err, rep, o.Sections["gpus"].Body)
		}
		prep, err := nvsmi.ParseProcesses(o.Sections["apps"].Body)
		if err != nil || len(prep.Processes) != 1 || len(prep.Skipped) > 0 {
			t.Errorf("%s: ParseProcesses: %v %+v\n%s", s.Name, err, prep, o.Sections["apps"].Body)
		}
		if !strings.Contains(string(o.Sections["ps"].Body), " dave ") {
			t.Errorf("%s: ps: %s", s.Name, o.Sections["ps"].Body)
		}
	}
}

func TestLaunchErrors(t *testing.T) {
	for _, specs := range [][]simfleet.HostSpec{
		{{Name: "a"}, {Name: "a"}},
		{{Name: "a", Capture: "no-such-gpu"}},
		{{Name: "a", Capture: "nvidia"}}, // ambiguous
		{{Name: "a", State: "busy"}},
		{{Name: "a", GPUs: 2, Processes: []simfleet.Process{{PID: 1, GPU: 2}}}},
	} {
		if f, err := simfleet.Launch(specs); err == nil {
			f.Close()
			t.Errorf("Launch(%+v) succeeded", specs)
		}
	}
}

// Close ends everything: hung sessions, silent connections, half-done handshakes.
func TestCloseStopsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	f, err := simfleet.Launch([]simfleet.HostSpec{
		{Name: "hang", Failure: simfleet.HangForever},
		{Name: "silent", Failure: simfleet.Silent},
		{Name: "nv", Failure: simfleet.HangNvidiaSMI},
		{Name: "ok"},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, f)
	var wg sync.WaitGroup
	for _, name := range []string{"hang", "nv"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = c.probeHost(name, probe.NewRequest(3600), time.Minute)
		}()
	}
	raw, err := net.Dial("tcp", c.hosts["silent"].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	half, err := net.Dial("tcp", c.hosts["ok"].Addr()) // connects, never handshakes
	if err != nil {
		t.Fatal(err)
	}
	defer half.Close()
	deadline := time.Now().Add(5 * time.Second)
	// the raw connections are counted when the server accepts them, which may
	// come after the probes' execs
	for s := f.Stats(); (s.Execs < 2 || s.Accepted < 4) && time.Now().Before(deadline); s = f.Stats() {
		time.Sleep(10 * time.Millisecond)
	}
	if s := f.Stats(); s.Execs != 2 || s.Accepted != 4 {
		t.Fatalf("stats before Close: %+v", s)
	}
	closed := make(chan struct{})
	go func() { f.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	wg.Wait()
	raw.Close()
	half.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for runtime.NumGoroutine() > before && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines before, %d after Close:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

func TestGenerate(t *testing.T) {
	a, b := simfleet.Generate(1000, 7), simfleet.Generate(1000, 7)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatal("Generate is not deterministic")
	}
	if fmt.Sprint(a) == fmt.Sprint(simfleet.Generate(1000, 8)) {
		t.Error("seed makes no difference")
	}
	var gpus, busy, shared, comma, slurm, docker, degraded, xids int
	users, caps, accounts := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, s := range a {
		if len(s.Slurm) > 0 {
			slurm++
		}
		for _, j := range s.Slurm {
			accounts[j.Account] = true
		}
		if s.ContainerEngine == "docker" {
			docker++
		}
		if s.GPUs != 8 || s.Failure != simfleet.None {
			t.Fatalf("%s: %+v", s.Name, s)
		}
		caps[s.Capture] = true
		gpus += s.GPUs
		for _, h := range s.Health {
			if len(h.XIDs) > 0 {
				xids++
			} else {
				degraded++
			}
		}
		onGPU := map[int]bool{}
		pids := map[int]int{}
		for _, p := range s.Processes {
			onGPU[p.GPU] = true
			users[p.User] = true
			pids[p.PID]++
			if strings.Contains(p.Name, ",") && strings.Contains(p.Name, " ") {
				comma++
			}
		}
		busy += len(onGPU)
		for _, n := range pids {
			if n > 1 {
				shared++
			}
		}
	}
	if frac := float64(busy) / float64(gpus); frac < 0.4 || frac > 0.65 {
		t.Errorf("%.2f of GPUs busy", frac)
	}
	if shared == 0 || comma == 0 || len(users) < 5 || len(caps) != 3 {
		t.Errorf("shared pids %d, comma names %d, users %d, captures %d", shared, comma, len(users), len(caps))
	}
	if degraded != 20 || xids != 10 {
		t.Errorf("%d degraded GPUs and %d with XIDs of 1000 hosts, want 20 and 10", degraded, xids)
	}
	if slurm < 300 || docker < 300 {
		t.Errorf("%d Slurm nodes, %d Docker hosts of 1000", slurm, docker)
	}
	if diff := cmp.Diff(map[string]bool{"vision-lab": true, "nlp-lab": true}, accounts); diff != "" {
		t.Errorf("the Slurm jobs' accounts (-want +got):\n%s", diff)
	}
	// and Demo launches
	f := testenv.StartFleet(t, simfleet.Demo())
	if n := len(f.Hosts()); n < 10 {
		t.Errorf("demo has %d hosts", n)
	}
}

// BenchmarkStart is Launch and Close of 1,000 generated hosts.
func BenchmarkStart(b *testing.B) {
	specs := simfleet.Generate(1000, 1)
	for b.Loop() {
		f, err := simfleet.Launch(specs)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

// BenchmarkServe: every host of the fleet probed at once, one connection and
// one session each, as fetch does. Client and servers share the CPUs.
func BenchmarkServe(b *testing.B) {
	health := func() probe.Request {
		r := probe.NewRequest(5)
		r.HealthFields, r.ProcessUtil, r.KernelLogSince = nvsmi.HealthFields, true, 360
		return r
	}
	for _, bc := range []struct {
		n       int
		name    string
		request func() probe.Request
	}{
		{1, "", func() probe.Request { return probe.NewRequest(5) }},
		{100, "", func() probe.Request { return probe.NewRequest(5) }},
		{100, "/health", health},
		{1000, "", func() probe.Request { return probe.NewRequest(5) }},
		{1000, "/health", health},
	} {
		n := bc.n
		b.Run(fmt.Sprintf("hosts=%d%s", n, bc.name), func(b *testing.B) {
			f := testenv.StartFleet(b, simfleet.Generate(n, 1))
			c := newClient(b, f)
			hosts := f.Hosts()
			for b.Loop() {
				var wg sync.WaitGroup
				errs := make(chan error, n)
				for _, h := range hosts {
					wg.Add(1)
					go func() {
						defer wg.Done()
						o, err := c.probeHost(h.Name, bc.request(), time.Minute)
						if err == nil && !o.Complete {
							err = fmt.Errorf("%s: incomplete", h.Name)
						}
						if err != nil {
							errs <- err
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/host")
		})
	}
}

// The demo's hosts answer the sections after ps as the script does: each
// process's cgroup once, squeue on a Slurm node for the jobs the cgroups
// name, docker ps only where asked for and a cgroup names a container.
func TestAttribution(t *testing.T) {
	f := testenv.StartFleet(t, simfleet.Demo())
	c := newClient(t, f)
	probeAs := func(name, containers string) (probe.Output, string) {
		t.Helper()
		req := probe.NewRequest(5)
		req.Containers = containers
		o, err := c.probeHost(name, req, time.Minute)
		if err != nil || !o.Complete {
			t.Fatalf("%s: %v, complete %v", name, err, o.Complete)
		}
		return o, probe.RecordPrefix(req.Nonce)
	}
	type answer struct {
		cgroups map[int]attrib.Cgroup
		jobs    map[string]attrib.Job
		names   map[string]string
		has     []string
	}
	read := func(o probe.Output, prefix string) answer {
		a := answer{cgroups: attrib.ParseCgroups(o.Sections[probe.SectionCgroups].Body, prefix)}
		asked := map[string]bool{}
		for _, cg := range a.cgroups {
			asked[cg.SlurmJob] = cg.SlurmJob != ""
		}
		a.jobs, _ = attrib.ParseSqueue(o.Sections[probe.SectionSqueue].Body, prefix, asked)
		a.names, _ = attrib.ParseContainers(o.Sections[probe.SectionDocker].Body, prefix)
		for _, s := range []string{probe.SectionCgroups, probe.SectionSqueue, probe.SectionDocker, probe.SectionPodman} {
			if o.Has(s) {
				a.has = append(a.has, s)
			}
		}
		return a
	}

	o, prefix := probeAs("h100-a03", probe.ContainersDocker)
	a := read(o, prefix)
	if diff := cmp.Diff([]string{"cgroups", "squeue"}, a.has); diff != "" {
		t.Errorf("h100-a03 sections (-want +got):\n%s", diff)
	}
	if got := a.cgroups[51200]; got != (attrib.Cgroup{SlurmJob: "7403"}) {
		t.Errorf("bob's cgroup: %+v", got)
	}
	if got := a.cgroups[51388]; got != (attrib.Cgroup{}) || len(a.cgroups) != 3 {
		t.Errorf("carol's cgroup %+v, %d processes: %v", got, len(a.cgroups), a.cgroups)
	}
	if diff := cmp.Diff(map[string]attrib.Job{"7403": {ID: "7400_3", Partition: "h100", Account: "nlp-lab", Name: "lr-sweep"}}, a.jobs); diff != "" {
		t.Errorf("squeue (-want +got):\n%s", diff)
	}

	o, prefix = probeAs("h200-b01", probe.ContainersDocker)
	a = read(o, prefix)
	var vllm attrib.Cgroup
	for _, cg := range a.cgroups {
		if cg.ContainerID != "" {
			vllm = cg
		}
	}
	if diff := cmp.Diff([]string{"cgroups", "docker"}, a.has); diff != "" {
		t.Errorf("h200-b01 sections (-want +got):\n%s", diff)
	}
	if a.names[vllm.ContainerID] != "frank-vllm-70b" || len(a.names) != 2 {
		t.Errorf("vllm's container %q, names %v", vllm.ContainerID, a.names)
	}
	if o, _ := probeAs("h200-b01", ""); o.Has(probe.SectionDocker) {
		t.Error("docker ps without containers = docker")
	}
	if o, _ := probeAs("h200-b01", probe.ContainersPodman); o.Has(probe.SectionDocker) || o.Has(probe.SectionPodman) {
		t.Error("podman ps on a host with docker")
	}

	o, prefix = probeAs("h100-a05", probe.ContainersDocker)
	a = read(o, prefix)
	if got := a.cgroups[61500]; got.Pod != "7c1e9b52-4d3a-4f0e-9a61-2b8d5e3f1c07" || got.ContainerID == "" {
		t.Errorf("erin's pod: %+v", got)
	}
	if diff := cmp.Diff([]string{"cgroups"}, a.has); diff != "" {
		t.Errorf("h100-a05 sections (-want +got):\n%s", diff) // a containerd pod: no docker here
	}

	// an idle host runs no ps, so reads no cgroups either
	if o, _ := probeAs("h200-b03", probe.ContainersDocker); o.Has(probe.SectionCgroups) {
		t.Error("cgroups read on an idle host")
	}
}

// TestEveryAMDCapture: a host on each AMD capture, with 3 GPUs (its
// capture's repeated where it has fewer), answers as the probe does on a
// real one: the tool it has, its answers, which parse to its GPUs, and a
// KFD section of the GPUs and the VRAM its process holds, without the 0
// entries the probe leaves out; no nvidia-smi section.
func TestEveryAMDCapture(t *testing.T) {
	var specs []simfleet.HostSpec
	for _, tool := range []string{captures.AMDSMI, captures.ROCmSMI} {
		for i, n := range captures.AMDNames(tool) {
			specs = append(specs, simfleet.HostSpec{Name: tool + "-" + n, AMD: tool + "/" + n, GPUs: 3,
				Processes: []simfleet.Process{{PID: 100 + i, User: "dave", Command: "prog --x", GPU: 1, MemMiB: 100}}})
		}
	}
	f := testenv.StartFleet(t, specs)
	c := newClient(t, f)
	for _, s := range specs {
		o, err := c.probeHost(s.Name, probe.NewRequest(1), 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		var rep rocm.Report
		if tools := probe.ParseTools(o); tools.AMDSMI != "" {
			metric := o.Sections[probe.SectionAMDSMIMetric].Body
			if len(bytes.TrimSpace(metric)) == 0 {
				metric = nil // a capture of static only: fetch reads the GPUs without readings
			}
			rep, err = rocm.ParseAMDSMI(o.Sections[probe.SectionAMDSMIStatic].Body, metric)
		} else {
			rep, err = rocm.ParseROCmSMI(o.Sections[probe.SectionROCmSMI].Body)
		}
		if err != nil || len(rep.GPUs) != 3 || o.Has(probe.SectionGPUs) {
			t.Errorf("%s: %d GPUs, %v; an nvidia-smi section: %v", s.Name, len(rep.GPUs), err, o.Has(probe.SectionGPUs))
		}
		kfd, err := rocm.ParseKFD(o.Sections[probe.SectionKFD].Body)
		if err != nil || len(kfd.Nodes) != 3 || len(kfd.Procs) != 1 || kfd.Procs[0].VRAMBytes != 100<<20 || kfd.Procs[0].GPUID != kfd.Nodes[1] {
			t.Errorf("%s: kfd %+v, %v", s.Name, kfd, err)
		}
		if !strings.Contains(string(o.Sections[probe.SectionPS].Body), " dave ") {
			t.Errorf("%s: ps: %s", s.Name, o.Sections[probe.SectionPS].Body)
		}
	}
}
