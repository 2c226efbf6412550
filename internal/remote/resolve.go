package remote

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kevinburke/ssh_config"
)

// A Target is one host alias resolved as OpenSSH would resolve it.
type Target struct {
	Alias         string // the name in the host list
	HostName      string
	Port          int
	User          string
	IdentityFiles []string // from ssh_config, after the ones from config.ini
	// IdentitiesOnly means only IdentityFile keys, not the agent's others.
	IdentitiesOnly  bool
	ProxyJump       []string // hops, first to last; each is [user@]host[:port] or an alias
	KnownHostsFiles []string // UserKnownHostsFile
	HostKeyAlias    string
}

// Addr is host:port for dialing.
func (t Target) Addr() string {
	return netJoin(t.HostName, t.Port)
}

// KnownHostsName is what known_hosts lines name this host by: HostKeyAlias,
// else HostName, in brackets with the port when it is not 22, as OpenSSH writes.
func (t Target) KnownHostsName() string {
	name := t.HostName
	if t.HostKeyAlias != "" {
		name = t.HostKeyAlias
	}
	return netJoin(name, t.Port)
}

// SSHConfig is a parsed ssh_config, user file first, then the system one,
// as OpenSSH reads them: the first value obtained for a key wins.
type SSHConfig struct {
	files []*indexedConfig
	home  string
	local string // local user name for %u and the default User
}

// LoadSSHConfig reads the user's file (missing is fine) and the system file
// (missing is fine). Either path may be "".
func LoadSSHConfig(userPath, systemPath string) (*SSHConfig, error) {
	sc := &SSHConfig{}
	sc.home, _ = os.UserHomeDir()
	if u, err := user.Current(); err == nil {
		sc.local = u.Username
	}
	for _, p := range []string{userPath, systemPath} {
		if p == "" {
			continue
		}
		f, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		cfg, err := ssh_config.Decode(f)
		f.Close()
		if err != nil {
			// the library's messages carry the line; add the file
			return nil, fmt.Errorf("%s: %v", p, strings.TrimPrefix(err.Error(), "ssh_config: "))
		}
		sc.files = append(sc.files, index(cfg))
	}
	return sc, nil
}

// indexedConfig finds the Host blocks for an alias without running every
// block's pattern against every alias: a fleet's config often has one block
// per host, and a thousand hosts times a thousand regexps is a second.
type indexedConfig struct {
	cfg      *ssh_config.Config
	literal  map[string][]int // alias -> blocks that name it exactly
	wildcard []int            // blocks with a pattern that needs matching
}

func index(cfg *ssh_config.Config) *indexedConfig {
	ic := &indexedConfig{cfg: cfg, literal: map[string][]int{}}
	for i, h := range cfg.Hosts {
		plain := true
		for _, p := range h.Patterns {
			if strings.ContainsAny(p.String(), "*?!") {
				plain = false
			}
		}
		if !plain {
			ic.wildcard = append(ic.wildcard, i)
			continue
		}
		for _, p := range h.Patterns {
			ic.literal[p.String()] = append(ic.literal[p.String()], i)
		}
	}
	return ic
}

// blocks returns the matching blocks in file order.
func (ic *indexedConfig) blocks(alias string) []*ssh_config.Host {
	lit, wild := ic.literal[alias], ic.wildcard
	var out []*ssh_config.Host
	for len(lit) > 0 || len(wild) > 0 {
		var i int
		if len(wild) == 0 || (len(lit) > 0 && lit[0] < wild[0]) {
			i, lit = lit[0], lit[1:]
		} else {
			i, wild = wild[0], wild[1:]
		}
		if h := ic.cfg.Hosts[i]; h.Matches(alias) {
			out = append(out, h)
		}
	}
	return out
}

var multiValued = map[string]bool{"identityfile": true}

var wanted = []string{"hostname", "port", "user", "identityfile", "identitiesonly", "proxyjump", "userknownhostsfile", "hostkeyalias"}

// values collects, for alias, the first value of each wanted key and every
// value of the multi-valued ones.
func (sc *SSHConfig) values(alias string) map[string][]string {
	vals := map[string][]string{}
	add := func(k, v string) {
		if multiValued[k] || len(vals[k]) == 0 {
			vals[k] = append(vals[k], v)
		}
	}
	for _, f := range sc.files {
		for _, h := range f.blocks(alias) {
			for _, n := range h.Nodes {
				switch t := n.(type) {
				case *ssh_config.KV:
					add(strings.ToLower(t.Key), t.Value)
				case *ssh_config.Include:
					for _, k := range wanted {
						if multiValued[k] {
							all, _ := t.GetAll(alias, k)
							for _, v := range all {
								add(k, v)
							}
						} else if v := t.Get(alias, k); v != "" {
							add(k, v)
						}
					}
				}
			}
		}
	}
	return vals
}

// Resolve returns the target for alias. A leading user@ and a trailing :port
// in the alias are honoured, as ssh's command line does.
func (sc *SSHConfig) Resolve(alias string) (Target, error) {
	t := Target{Alias: alias}
	name := alias
	var explicitUser string
	explicitPort := 0
	if u, h, ok := strings.Cut(name, "@"); ok {
		explicitUser, name = u, h
	}
	if h, p, ok := splitPort(name); ok {
		name, explicitPort = h, p
	}
	v := sc.values(name)
	first := func(k string) string {
		if len(v[k]) > 0 {
			return strings.TrimSpace(v[k][0])
		}
		return ""
	}

	t.HostName = name
	if hn := first("hostname"); hn != "" {
		t.HostName = expandTokens(hn, map[byte]string{'h': name, 'n': name})
	}
	t.Port = 22
	if p := first("port"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return t, fmt.Errorf("ssh_config: Port %q for %s is not a port number", p, name)
		}
		t.Port = n
	}
	if explicitPort != 0 {
		t.Port = explicitPort
	}
	t.User = first("user")
	if explicitUser != "" {
		t.User = explicitUser
	}
	if t.User == "" {
		t.User = sc.local
	}
	tokens := map[byte]string{
		'h': t.HostName, 'n': name, 'p': strconv.Itoa(t.Port), 'r': t.User,
		'u': sc.local, 'd': sc.home,
	}
	for _, f := range v["identityfile"] {
		if strings.EqualFold(strings.TrimSpace(f), "none") {
			continue
		}
		t.IdentityFiles = append(t.IdentityFiles, sc.path(expandTokens(unquote(f), tokens)))
	}
	t.IdentitiesOnly = strings.EqualFold(first("identitiesonly"), "yes")
	if pj := first("proxyjump"); pj != "" && !strings.EqualFold(pj, "none") {
		for _, hop := range strings.Split(pj, ",") {
			if hop = strings.TrimSpace(hop); hop != "" {
				t.ProxyJump = append(t.ProxyJump, hop)
			}
		}
	}
	if kh := first("userknownhostsfile"); kh != "" {
		for _, f := range splitQuoted(kh) {
			if !strings.EqualFold(f, "none") {
				t.KnownHostsFiles = append(t.KnownHostsFiles, sc.path(expandTokens(unquote(f), tokens)))
			}
		}
	}
	t.HostKeyAlias = first("hostkeyalias")
	return t, nil
}

func (sc *SSHConfig) path(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		return filepath.Join(sc.home, strings.TrimPrefix(p, "~"))
	}
	return p
}

// expandTokens does ssh_config's %-expansion for the tokens given; an unknown
// token is left as it is.
func expandTokens(s string, tokens map[byte]string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		if s[i] == '%' {
			b.WriteByte('%')
		} else if v, ok := tokens[s[i]]; ok {
			b.WriteString(v)
		} else {
			b.WriteByte('%')
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func unquote(s string) string {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return s[1 : len(s)-1]
	}
	return s
}

// splitPort splits "host:port" and "[host]:port"; a bare IPv6 address is not split.
func splitPort(s string) (string, int, bool) {
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]:")
		if end < 0 {
			return s, 0, false
		}
		p, err := strconv.Atoi(s[end+2:])
		if err != nil {
			return s, 0, false
		}
		return s[1:end], p, true
	}
	if strings.Count(s, ":") != 1 {
		return s, 0, false
	}
	h, ps, _ := strings.Cut(s, ":")
	p, err := strconv.Atoi(ps)
	if err != nil || p < 1 || p > 65535 {
		return s, 0, false
	}
	return h, p, true
}

func netJoin(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// splitQuoted splits on white space, keeping "quoted parts" whole.
func splitQuoted(s string) []string {
	var out []string
	var cur strings.Builder
	inQuote, have := false, false
	for _, r := range s {
		switch {
		case r == '"':
			inQuote, have = !inQuote, true
		case (r == ' ' || r == '\t') && !inQuote:
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}
