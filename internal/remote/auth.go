package remote

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// Keys loads key files once per run and talks to ssh-agent. A batch job
// never prompts: an encrypted key file is skipped with a note, and its
// passphrase belongs in the agent.
type Keys struct {
	mu    sync.Mutex
	files map[string]*keyFile

	agentOnce sync.Once
	agent     agent.ExtendedAgent
	agentErr  error
	agentSock string
}

type keyFile struct {
	signer ssh.Signer
	note   string // why it is not used, when signer is nil
}

// NewKeys uses the agent at sock ($SSH_AUTH_SOCK; "" for none).
func NewKeys(sock string) *Keys {
	return &Keys{files: map[string]*keyFile{}, agentSock: sock}
}

// Close ends the agent connection.
func (k *Keys) Close() {
	if c, ok := k.agent.(interface{ Close() error }); ok && c != nil {
		c.Close()
	}
}

func (k *Keys) file(path string, explicit bool) *keyFile {
	k.mu.Lock()
	defer k.mu.Unlock()
	if kf, ok := k.files[path]; ok {
		return kf
	}
	kf := &keyFile{}
	k.files[path] = kf
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist) && !explicit:
		kf.note = "" // a default IdentityFile that does not exist is no news
	case err != nil:
		kf.note = fmt.Sprintf("key %s: %v", path, err)
	default:
		kf.signer, err = ssh.ParsePrivateKey(data)
		var pm *ssh.PassphraseMissingError
		switch {
		case errors.As(err, &pm):
			kf.note = fmt.Sprintf("key %s is encrypted and fetch never prompts: load it into ssh-agent (ssh-add %s)", path, path)
		case err != nil:
			kf.note = fmt.Sprintf("key %s: %v", path, err)
		}
	}
	return kf
}

func (k *Keys) agentClient() (agent.ExtendedAgent, error) {
	k.agentOnce.Do(func() {
		if k.agentSock == "" {
			return
		}
		conn, err := net.Dial("unix", k.agentSock)
		if err != nil {
			k.agentErr = fmt.Errorf("ssh-agent at %s: %v", k.agentSock, err)
			return
		}
		k.agent = agent.NewClient(conn)
	})
	return k.agent, k.agentErr
}

// defaultIdentities are what ssh tries when no IdentityFile is configured.
func defaultIdentities(home string) []string {
	var out []string
	for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
		out = append(out, filepath.Join(home, ".ssh", n))
	}
	return out
}

// Signers returns, in order, the signers for t: the key files given in
// config.ini, then ssh_config's IdentityFile (or ssh's defaults), then the
// agent's other keys (unless IdentitiesOnly). The configured keys go first
// because sshd disconnects after MaxAuthTries (6) refused keys. notes says
// what was skipped and why, for the message when no key is accepted.
func (k *Keys) Signers(explicit []string, t Target, home string) (signers []ssh.Signer, notes []string) {
	seen := map[string]bool{}
	add := func(s ssh.Signer) {
		id := string(s.PublicKey().Marshal())
		if !seen[id] {
			seen[id] = true
			signers = append(signers, s)
		}
	}
	files := t.IdentityFiles
	if len(files) == 0 {
		files = defaultIdentities(home)
	}
	for i, p := range append(append([]string{}, explicit...), files...) {
		kf := k.file(p, i < len(explicit) || len(t.IdentityFiles) > 0)
		if kf.signer != nil {
			add(kf.signer)
		} else if kf.note != "" {
			notes = append(notes, kf.note)
		}
	}
	ag, err := k.agentClient()
	if err != nil {
		notes = append(notes, err.Error())
	}
	if ag != nil && !t.IdentitiesOnly {
		agentSigners, err := ag.Signers()
		if err != nil {
			notes = append(notes, "ssh-agent: "+err.Error())
		}
		for _, s := range agentSigners {
			add(s)
		}
	}
	return signers, notes
}

func describeKeys(signers []ssh.Signer) string {
	if len(signers) == 0 {
		return "no key"
	}
	var fps []string
	for _, s := range signers {
		fps = append(fps, ssh.FingerprintSHA256(s.PublicKey()))
	}
	return strings.Join(fps, ", ")
}
