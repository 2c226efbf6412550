package remote

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/sshdtest"
	"golang.org/x/crypto/ssh"
)

// Live mode's Keeper, polling a real sshd twice: at the first poll
// known_hosts lacks the host, the admin then adds its key, and the second
// poll (after the Keeper's back-off and HostKeys' next look) is accepted
// without a restart. A key on record that then differs from the
// host's is refused at the next dial.
func TestRealSSHDKeeperSeesKnownHostsChange(t *testing.T) {
	sshdtest.Require(t)
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	signer, keyPath := sshdtest.NewUserKey(t, dir)
	srv := sshdtest.Start(t, sshdtest.Options{Addr: "127.0.0.61", AuthorizedKeys: []ssh.PublicKey{signer.PublicKey()}, HostKeyTypes: []string{"ed25519"}})
	known := filepath.Join(dir, "known_hosts")
	cfg := writeFile(t, dir, "config", fmt.Sprintf("Host gpu01\n  HostName %s\n  Port %d\n  User root\n  IdentityFile %s\n  UserKnownHostsFile %s\n",
		srv.Host(), srv.Port(), keyPath, known))
	sc, err := LoadSSHConfig(cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	hk := NewHostKeys(false)
	hk.now = clock
	client := &Client{SSHConfig: sc, HostKeys: hk, Keys: NewKeys(""), Home: dir, Timeout: 10 * time.Second}
	defer client.Close()
	keeper := &Keeper{Client: client, Backoff: time.Minute, Now: clock}
	defer keeper.Close()
	poll := func(k *Keeper) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := k.Run(ctx, "gpu01", "true", nil)
		return err
	}
	const unknown, changed = "is not in ", "HOST KEY CHANGED"

	if err := poll(keeper); err == nil || !strings.Contains(err.Error(), unknown) {
		t.Fatalf("first poll: %v, want the host unknown", err)
	}
	if err := os.WriteFile(known, []byte(srv.KnownHostsLines()), 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	if err := poll(keeper); err != nil {
		t.Fatalf("second poll, after the key was added: %v\nsshd log:\n%s", err, srv.Log())
	}

	// a fresh Keeper over the same Client dials again
	next := &Keeper{Client: client, Backoff: time.Minute, Now: clock}
	defer next.Close()
	other, _ := sshdtest.NewUserKey(t, t.TempDir())
	if err := os.WriteFile(known, []byte(srv.KnownHostsLinesFor(other.PublicKey())), 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	if err := poll(next); err == nil || !strings.Contains(err.Error(), changed) {
		t.Errorf("a new dial, another key on record: %v, want it refused as changed", err)
	}
}
