package simfleet

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net"

	"golang.org/x/crypto/ssh"
)

// DropConnections closes every connection the host has open now, as a
// reboot or a NAT that forgets a connection would; the host goes on
// accepting new ones. It returns how many it closed.
func (f *Fleet) DropConnections(name string) int {
	h, ok := f.byName[name]
	if !ok {
		return 0
	}
	f.mu.Lock()
	var drop []net.Conn
	for c, ch := range f.conns {
		if ch == h {
			drop = append(drop, c)
		}
	}
	f.mu.Unlock()
	for _, c := range drop {
		_ = c.Close()
	}
	return len(drop)
}

// RotateHostKey gives the host a new host key, as a reinstalled host has:
// new connections see it (the known_hosts written earlier holds the old
// one); connections already open keep theirs.
func (f *Fleet) RotateHostKey(name string) (ssh.PublicKey, error) {
	h, ok := f.byName[name]
	if !ok {
		return nil, fmt.Errorf("no host %q", name)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, err
	}
	h.keyMu.Lock()
	defer h.keyMu.Unlock()
	// the same settings and callbacks, another key (AddHostKey on a copy
	// would write into the old config's key list)
	cfg := &ssh.ServerConfig{Config: h.cfg.Config, ServerVersion: h.cfg.ServerVersion, PublicKeyCallback: h.cfg.PublicKeyCallback}
	cfg.AddHostKey(signer)
	h.cfg, h.signer = cfg, signer
	return signer.PublicKey(), nil
}
