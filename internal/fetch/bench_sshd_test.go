package fetch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/probe"
	"github.com/gpumon/gpumon/internal/sshdtest"
	"golang.org/x/crypto/ssh"
)

// BenchmarkRealSSHD30 polls 30 real sshd hosts on this machine, first with
// fetch, then with 30 OpenSSH clients started in parallel (`ssh host 'sh -s'
// < script &` each, then wait) running the very same probe script. The hosts
// and the clients share this machine's cores.
func BenchmarkRealSSHD30(b *testing.B) {
	const n = 30
	sshdtest.Require(b)
	sshdtest.EnsureUser(b, loginUser)
	home := b.TempDir()
	b.Setenv("HOME", home)
	b.Setenv("SSH_AUTH_SOCK", "")
	key, keyPath := sshdtest.NewUserKey(b, b.TempDir())
	bin, data := sshdtest.TempDir(b), sshdtest.TempDir(b)
	sshdtest.WriteFakeNvidiaSMI(b, bin, data)
	var opts []sshdtest.Options
	for i := 0; i < n; i++ {
		opts = append(opts, sshdtest.Options{Addr: fmt.Sprintf("127.0.1.%d", 10+i), AuthorizedKeys: []ssh.PublicKey{key.PublicKey()}, FakeBin: bin, HostKeyTypes: []string{"ed25519"}})
	}
	servers := sshdtest.StartMany(b, opts...)
	var cfg, known strings.Builder
	var hosts []string
	for i, srv := range servers {
		name := fmt.Sprintf("gpu%02d", i+1)
		hosts = append(hosts, name)
		fmt.Fprintf(&cfg, "Host %s\n  HostName %s\n  Port %d\n  User %s\n  IdentityFile %s\n", name, srv.Host(), srv.Port(), loginUser, keyPath)
		known.WriteString(srv.KnownHostsLines())
		sshdtest.SetHostOutput(b, data, srv.Host(), "gpu", realGPUs, 0)
		sshdtest.SetHostOutput(b, data, srv.Host(), "apps", "pid, gpu_uuid, used_gpu_memory [MiB]\n1, GPU-real-0, 100\n", 0)
	}
	dir := b.TempDir()
	sshCfg := filepath.Join(home, ".ssh", "config")
	knownHosts := filepath.Join(home, ".ssh", "known_hosts")
	os.MkdirAll(filepath.Dir(sshCfg), 0o700)
	os.WriteFile(sshCfg, []byte(cfg.String()), 0o600)
	os.WriteFile(knownHosts, []byte(known.String()), 0o600)
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[common]\ntimeout = 20\nhosts = "+strings.Join(hosts, ",")+"\n"), 0o644)
	out := filepath.Join(dir, "load_data.csv")

	b.Run("fetch", func(b *testing.B) {
		before := cpuTime(syscall.RUSAGE_SELF)
		for b.Loop() {
			var stderr bytes.Buffer
			if err := Main(context.Background(), []string{"-c", ini, "-o", out}, &stderr, &stderr); err != nil {
				b.Fatal(err)
			}
			if !strings.Contains(stderr.String(), "30 hosts: 30 ok") {
				b.Fatalf("not every host answered: %s", stderr.String())
			}
		}
		reportPerHost(b, n, cpuTime(syscall.RUSAGE_SELF)-before, "client-cpu-µs/host")
	})

	script := filepath.Join(dir, "probe.sh")
	os.WriteFile(script, []byte(probe.NewRequest(8).Script()), 0o644)
	var loop strings.Builder
	for _, h := range hosts {
		fmt.Fprintf(&loop, "ssh -F %s -o BatchMode=yes -o UserKnownHostsFile=%s %s 'sh -s' <%s >/dev/null &\n", sshCfg, knownHosts, h, script)
	}
	loop.WriteString("wait\n")
	b.Run("openssh", func(b *testing.B) {
		before := cpuTime(syscall.RUSAGE_CHILDREN)
		for b.Loop() {
			if out, err := exec.Command("/bin/sh", "-c", loop.String()).CombinedOutput(); err != nil || len(out) > 0 {
				b.Fatalf("openssh clients: %v\n%s", err, out)
			}
		}
		reportPerHost(b, n, cpuTime(syscall.RUSAGE_CHILDREN)-before, "client-cpu-µs/host")
	})
}

// cpuTime is user+system CPU of this process, or of its waited-for children.
func cpuTime(who int) time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(who, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportPerHost adds wall time and client CPU per host to the benchmark line.
func reportPerHost(b *testing.B, hosts int, cpu time.Duration, unit string) {
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/run")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*hosts), unit)
}
