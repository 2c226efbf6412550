package sshdtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/crypto/ssh"
)

// hostKeysFor makes the host keys for o: copies of o.HostKeysFrom's, or fresh
// ones of o.HostKeyTypes (generated concurrently: RSA takes the longest).
func hostKeysFor(o Options) ([]hostKey, error) {
	if o.HostKeysFrom != nil {
		keys := make([]hostKey, len(o.HostKeysFrom.keys))
		copy(keys, o.HostKeysFrom.keys)
		return keys, nil
	}
	types := o.HostKeyTypes
	if len(types) == 0 {
		types = defaultHostKeyTypes
	}
	keys := make([]hostKey, len(types))
	errs := make([]error, len(types))
	done := make(chan struct{})
	for i, typ := range types {
		go func() {
			defer func() { done <- struct{}{} }()
			priv, err := newPrivateKey(typ)
			if err != nil {
				errs[i] = err
				return
			}
			keys[i], errs[i] = makeHostKey(typ, priv, "sshdtest host key")
		}()
	}
	for range types {
		<-done
	}
	return keys, errors.Join(errs...)
}

func newPrivateKey(typ string) (crypto.Signer, error) {
	switch typ {
	case "ed25519":
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		return priv, err
	case "ecdsa":
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "rsa":
		return rsa.GenerateKey(rand.Reader, 2048)
	}
	return nil, fmt.Errorf("unknown host key type %q (want ed25519, ecdsa or rsa)", typ)
}

func makeHostKey(typ string, priv crypto.Signer, comment string) (hostKey, error) {
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return hostKey{}, err
	}
	pub, err := ssh.NewPublicKey(priv.Public())
	if err != nil {
		return hostKey{}, err
	}
	return hostKey{typ: typ, pem: pem.EncodeToMemory(block), pub: pub}, nil
}

// NewUserKey makes an ed25519 client key. The private key is written in
// OpenSSH format, mode 0600, to privPath in dir ("id_ed25519", or
// "id_ed25519_N" when taken), the public key to privPath+".pub".
func NewUserKey(t testing.TB, dir string) (signer ssh.Signer, privPath string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	k, err := makeHostKey("ed25519", priv, "sshdtest user key")
	if err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	if signer, err = ssh.NewSignerFromKey(priv); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	for n := 1; ; n++ {
		privPath = filepath.Join(dir, "id_ed25519")
		if n > 1 {
			privPath += "_" + strconv.Itoa(n)
		}
		f, err := os.OpenFile(privPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			t.Fatalf("sshdtest: %v", err)
		}
		_, err = f.Write(k.pem)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(privPath, 0o600)
		}
		if err == nil {
			err = os.WriteFile(privPath+".pub", ssh.MarshalAuthorizedKey(k.pub), 0o644)
		}
		if err != nil {
			t.Fatalf("sshdtest: %v", err)
		}
		return signer, privPath
	}
}
