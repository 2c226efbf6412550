package simfleet

import (
	"bytes"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
)

// ClientFiles are the paths WriteClientFiles wrote, all absolute.
type ClientFiles struct {
	Dir        string
	Key        string // id_ed25519, the key every host but AuthReject ones accepts
	SSHConfig  string // ssh_config: one Host block per host
	KnownHosts string // known_hosts: [ip]:port and each host's key (another for WrongHostKey)
	ConfigINI  string // config.ini for gpumon fetch
}

// User is the account name the written files log in as.
const User = "gpumon"

// WriteClientFiles writes into dir (made if need be) what a client needs to
// poll the fleet: id_ed25519, ssh_config, known_hosts and config.ini.
func (f *Fleet) WriteClientFiles(dir string) (ClientFiles, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return ClientFiles{}, fmt.Errorf("simfleet: %v", err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return ClientFiles{}, fmt.Errorf("simfleet: %v", err)
	}
	cf := ClientFiles{
		Dir:        abs,
		Key:        filepath.Join(abs, "id_ed25519"),
		SSHConfig:  filepath.Join(abs, "ssh_config"),
		KnownHosts: filepath.Join(abs, "known_hosts"),
		ConfigINI:  filepath.Join(abs, "config.ini"),
	}
	block, err := ssh.MarshalPrivateKey(f.clientKey, "gpumon simfleet client")
	if err != nil {
		return ClientFiles{}, fmt.Errorf("simfleet: %v", err)
	}
	var cfg, kh bytes.Buffer
	names := make([]string, 0, len(f.hosts))
	for _, h := range f.hosts {
		names = append(names, h.spec.Name)
		fmt.Fprintf(&cfg, "Host %s\n  HostName %s\n  Port %d\n  User %s\n  IdentityFile %s\n\n",
			h.spec.Name, h.ip, h.port, User, cf.Key)
		addr := h.ip
		if h.port != 22 {
			addr = "[" + h.ip + "]:" + strconv.Itoa(h.port)
		}
		kh.WriteString(addr + " ")
		kh.Write(ssh.MarshalAuthorizedKey(h.knownKey))
	}
	ini := fmt.Sprintf("[common]\nuser = %s\nhosts = %s\nkey_filename = %s\nssh_config = %s\nknown_hosts = %s\ntimeout = 5\n",
		User, strings.Join(names, ", "), cf.Key, cf.SSHConfig, cf.KnownHosts)
	for _, w := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{cf.Key, pem.EncodeToMemory(block), 0o600},
		{cf.SSHConfig, cfg.Bytes(), 0o644},
		{cf.KnownHosts, kh.Bytes(), 0o644},
		{cf.ConfigINI, []byte(ini), 0o644},
	} {
		if err := writeFile(w.path, w.data, w.mode); err != nil {
			return ClientFiles{}, fmt.Errorf("simfleet: %v", err)
		}
	}
	return cf, nil
}

// writeFile replaces path with data: written to a temporary file, then renamed.
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
