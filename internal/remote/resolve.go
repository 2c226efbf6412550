package remote

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
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
	// ProxyCommand is the command whose stdin and stdout are the connection,
	// with its %-tokens not yet expanded (%r is the user finally chosen,
	// which config.ini may still change). "" connects directly.
	ProxyCommand string
	// AddressFamily is ssh_config's: "inet", "inet6", or "" for any.
	AddressFamily string
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
	files []*configFile
	home  string
	local string // local user name for %u and the default User
}

// includeMarker replaces the keyword of Include lines before the library
// parses a file: the library would follow them itself, but it resolves
// relative paths against the account's home rather than $HOME, reads
// /etc/ssh's includes as the user's, and keeps the included files' names to
// itself, so that a bad line there could not be reported by file and line.
const includeMarker = "GpumonInclude"

var includeLine = regexp.MustCompile(`(?i)^(\s*)include(\s*=|\s)`)

// matchLine is a Match line up to its first argument; blockStart is a line
// that starts a block (Host or Match).
var (
	matchLine  = regexp.MustCompile(`(?i)^([ \t]*)match(?:[ \t]*=[ \t]*|[ \t]+|$)`)
	blockStart = regexp.MustCompile(`(?i)^[ \t]*(?:host|match)(?:[ \t]*=|[ \t]|$)`)
)

// maxIncludeDepth is OpenSSH's (READCONF_MAX_DEPTH): it stops include loops.
const maxIncludeDepth = 16

// LoadSSHConfig reads the user's file (missing is fine) and the system file
// (missing is fine), with the files they include. Either path may be "".
func LoadSSHConfig(userPath, systemPath string) (*SSHConfig, error) {
	sc := &SSHConfig{}
	sc.home, _ = os.UserHomeDir()
	if u, err := user.Current(); err == nil {
		sc.local = u.Username
	}
	for i, p := range []string{userPath, systemPath} {
		if p == "" {
			continue
		}
		f, err := sc.load(p, i == 1, 0)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		sc.files = append(sc.files, f)
	}
	return sc, nil
}

// configFile is one parsed file. It finds the Host blocks for an alias
// without running every block's pattern against every alias: a fleet's config
// often has one block per host, and a thousand hosts times a thousand regexps
// is a second.
type configFile struct {
	path     string
	lines    []string // as read, for values the library mangles (ProxyCommand)
	cfg      *ssh_config.Config
	literal  map[string][]int // alias -> blocks that name it exactly
	wildcard []int            // blocks with a pattern that needs matching
	includes map[int][]*configFile
}

var libraryPosition = regexp.MustCompile(`^\((\d+), \d+\): (ssh_config: )?`)

func (sc *SSHConfig) load(path string, system bool, depth int) (*configFile, error) {
	if depth > maxIncludeDepth {
		return nil, fmt.Errorf("%s: more than %d levels of Include (a loop?)", path, maxIncludeDepth)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f := &configFile{path: path, literal: map[string][]int{}, includes: map[int][]*configFile{}}
	f.lines = strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
	masked := make([]string, len(f.lines))
	skipping := false // in a Match final block of the system's files
	for i, l := range f.lines {
		if blockStart.MatchString(l) {
			skipping = false
		}
		if m := matchLine.FindStringSubmatch(l); m != nil {
			// The library would read "Match host a exec x" as Host a exec x,
			// and "Match host a,b" as one pattern "a,b": fetch reads Match
			// lines itself and hands the library only the ones it accepts,
			// rewritten as the library understands them.
			args, err := matchArgs(l[len(m[0]):])
			r := checkMatch(args)
			switch {
			case err != nil:
				return nil, fmt.Errorf("%s:%d: Match: %v", path, i+1, err)
			case r.final && system:
				// RHEL's and Fedora's /etc/ssh/ssh_config.d/50-redhat.conf
				// hold "Match final all", which includes the system-wide
				// crypto policy: ssh applies such a block in a last pass
				// over the files, after every other line. fetch makes no
				// such pass; refusing the block would stop fetch on every
				// RHEL machine, so in the system's files (only) the whole
				// block, its Includes with it, is left out.
				skipping = true
			case r.refused != "":
				return nil, fmt.Errorf("%s:%d: %s: %s", path, i+1, shorten(strings.TrimSpace(l)), r.refused)
			default:
				l = m[1] + "Match host " + strings.Join(r.patterns, " ")
			}
		}
		if skipping {
			continue // left empty: the line numbers stay as in the file
		}
		masked[i] = includeLine.ReplaceAllString(l, "${1}"+includeMarker+"${2}")
	}
	f.cfg, err = ssh_config.DecodeBytes([]byte(strings.Join(masked, "\n")))
	if err != nil {
		// the library's messages carry the line as "(L, C): "
		msg := libraryPosition.ReplaceAllString(strings.TrimPrefix(err.Error(), "ssh_config: "), "${1}: ")
		return nil, fmt.Errorf("%s:%s", path, strings.TrimSuffix(msg, "\n"))
	}
	for i, h := range f.cfg.Hosts {
		plain := true
		for _, p := range h.Patterns {
			if strings.ContainsAny(p.String(), "*?!") {
				plain = false
			}
		}
		if !plain {
			f.wildcard = append(f.wildcard, i)
		} else {
			for _, p := range h.Patterns {
				f.literal[p.String()] = append(f.literal[p.String()], i)
			}
		}
		for _, n := range h.Nodes {
			if kv, ok := n.(*ssh_config.KV); ok && kv.Key == includeMarker {
				line := kv.Pos().Line
				if f.includes[line], err = sc.include(f.rawValue(line), system, depth); err != nil {
					return nil, err
				}
			}
		}
	}
	return f, nil
}

// include loads the files an Include line names, in the order OpenSSH reads
// them: relative names are in ~/.ssh (/etc/ssh for the system file), and a
// glob's matches come sorted.
func (sc *SSHConfig) include(args string, system bool, depth int) ([]*configFile, error) {
	var out []*configFile
	for _, pattern := range splitQuoted(args) {
		if strings.HasPrefix(pattern, "#") {
			break
		}
		switch {
		case strings.HasPrefix(pattern, "~"):
			pattern = sc.path(pattern)
		case filepath.IsAbs(pattern):
		case system:
			pattern = filepath.Join("/etc/ssh", pattern)
		default:
			pattern = filepath.Join(sc.home, ".ssh", pattern)
		}
		matches, err := filepath.Glob(pattern)
		if err != nil {
			return nil, fmt.Errorf("bad Include pattern %s: %v", pattern, err)
		}
		for _, m := range matches {
			f, err := sc.load(m, system, depth+1)
			if errors.Is(err, os.ErrNotExist) {
				continue // gone since the glob, or a dangling link: as if never matched
			}
			if err != nil {
				return nil, err // it names its own file
			}
			out = append(out, f)
		}
	}
	return out, nil
}

// rawValue is the rest of line n (1-based) after its keyword, as OpenSSH
// reads ProxyCommand: quotes and '#' belong to the command, for the shell.
func (f *configFile) rawValue(n int) string {
	if n < 1 || n > len(f.lines) {
		return ""
	}
	s := strings.TrimLeft(f.lines[n-1], " \t")
	s = strings.TrimLeft(strings.TrimLeft(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"), " \t=")
	return strings.TrimRight(s, " \t\f")
}

// blocks returns the matching blocks in file order.
func (f *configFile) blocks(alias string) []*ssh_config.Host {
	lit, wild := f.literal[alias], f.wildcard
	var out []*ssh_config.Host
	for len(lit) > 0 || len(wild) > 0 {
		var i int
		if len(wild) == 0 || (len(lit) > 0 && lit[0] < wild[0]) {
			i, lit = lit[0], lit[1:]
		} else {
			i, wild = wild[0], wild[1:]
		}
		if h := f.cfg.Hosts[i]; hostMatches(h, alias) {
			out = append(out, h)
		}
	}
	return out
}

// hostMatches says whether a Host block, or a Match all or Match host block
// (see checkMatch), applies to alias, as OpenSSH's match_pattern_list
// decides: a negated pattern that matches excludes the host, else any
// pattern that matches includes it. A pattern's * is any run of characters
// and ? exactly one (the library's own Matches lets ? match none).
//
// fetch matches the name as listed in the host list (user@ and :port
// removed), for Host and for Match host alike. OpenSSH matches Match host
// against the HostName when a line read before the Match set one (and
// against the canonical name in its final pass), else against that same
// name: the docs (fetch.md, "How a host is reached") say so.
func hostMatches(h *ssh_config.Host, alias string) bool {
	found := false
	for _, p := range h.Patterns {
		s := p.String()
		negated := strings.HasPrefix(s, "!")
		if !wildcardMatch(strings.TrimPrefix(s, "!"), alias) {
			continue
		}
		if negated {
			return false
		}
		found = true
	}
	return found
}

// wildcardMatch is OpenSSH's match_pattern: * matches any run of
// characters, ? exactly one, every other character itself.
func wildcardMatch(pattern, s string) bool {
	// the usual backtracking over the last *: linear in practice
	p, i, star, mark := 0, 0, -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == s[i]):
			p++
			i++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// A setting is one keyword line that applies to the host being resolved.
type setting struct {
	keyword string // as written
	key     string // lower case, OpenSSH's aliases replaced (see keywordAliases)
	value   string // as the library reads it (outer quotes removed)
	raw     string // the rest of the line (see rawValue)
	file    string
	line    int
}

func (s setting) where() string { return fmt.Sprintf("%s:%d", s.file, s.line) }

// settings lists, in the order OpenSSH reads them, every keyword line that
// applies to alias.
func (sc *SSHConfig) settings(alias string) []setting {
	var out []setting
	for _, f := range sc.files {
		f.collect(alias, &out)
	}
	return out
}

func (f *configFile) collect(alias string, out *[]setting) {
	for _, h := range f.blocks(alias) {
		for _, n := range h.Nodes {
			kv, ok := n.(*ssh_config.KV)
			if !ok {
				continue
			}
			line := kv.Pos().Line
			if kv.Key == includeMarker {
				for _, inc := range f.includes[line] {
					inc.collect(alias, out)
				}
				continue
			}
			key := strings.ToLower(kv.Key)
			if k, ok := keywordAliases[key]; ok {
				key = k
			}
			*out = append(*out, setting{keyword: kv.Key, key: key, value: strings.TrimSpace(kv.Value), raw: f.rawValue(line), file: f.path, line: line})
		}
	}
}

// multiValued keywords add up; for every other one the first value obtained
// is the one used.
var multiValued = map[string]bool{
	"identityfile": true, "certificatefile": true, "sendenv": true,
	"localforward": true, "remoteforward": true, "dynamicforward": true,
}

// effective picks, from the settings for alias, the ones ssh would use: the
// first of each keyword (all of a multi-valued one; the first of ProxyJump
// and ProxyCommand, which exclude each other), and checks each against what
// fetch can do (see keywordPolicy).
func effective(all []setting, alias string) (map[string][]setting, error) {
	eff := map[string][]setting{}
	var ignoreUnknown []string
	for _, s := range all {
		slot := s.key
		if slot == "proxycommand" {
			slot = "proxyjump"
		}
		if !multiValued[s.key] && len(eff[slot]) > 0 {
			continue
		}
		rule, known := keywordPolicy[s.key]
		if !known {
			if matchesAny(s.key, ignoreUnknown) {
				continue
			}
			return nil, fmt.Errorf("%s: %s (for %s) is not an ssh_config keyword fetch knows; if ssh accepts it, it is newer than fetch: list it in IgnoreUnknown if it may be ignored", s.where(), s.keyword, alias)
		}
		if why := rule(s.value); why != "" {
			return nil, fmt.Errorf("%s: %s %s (for %s): %s", s.where(), s.keyword, shorten(s.value), alias, why)
		}
		if s.key == "ignoreunknown" {
			ignoreUnknown = strings.Split(strings.ToLower(s.value), ",")
		}
		eff[slot] = append(eff[slot], s)
	}
	return eff, nil
}

// matchesAny matches key against ssh_config patterns (* and ?).
func matchesAny(key string, patterns []string) bool {
	for _, p := range patterns {
		if ok, _ := filepath.Match(strings.TrimSpace(p), key); ok {
			return true
		}
	}
	return false
}

func shorten(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// Resolve returns the target for alias. A leading user@ and a trailing :port
// in the alias are honoured, as ssh's command line does. A keyword that
// applies to the host and that fetch cannot honour is an error naming the
// file and line: fetch never connects otherwise than ssh would.
func (sc *SSHConfig) Resolve(alias string) (Target, error) {
	t := Target{Alias: alias}
	explicitUser, name, explicitPort := splitAlias(alias)
	v, err := effective(sc.settings(name), name)
	if err != nil {
		return t, err
	}
	first := func(k string) string {
		if len(v[k]) > 0 {
			return v[k][0].value
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
			return t, fmt.Errorf("%s: Port %q for %s is not a port number", v["port"][0].where(), p, name)
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
	for _, s := range v["identityfile"] {
		if strings.EqualFold(s.value, "none") {
			continue
		}
		t.IdentityFiles = append(t.IdentityFiles, sc.path(expandTokens(unquote(s.value), tokens)))
	}
	t.IdentitiesOnly = strings.EqualFold(first("identitiesonly"), "yes")
	if p := v["proxyjump"]; len(p) > 0 && !strings.EqualFold(p[0].value, "none") {
		if p[0].key == "proxycommand" {
			t.ProxyCommand = p[0].raw
			if t.ProxyCommand == "" {
				return t, fmt.Errorf("%s: ProxyCommand for %s has no command (write none to connect directly)", p[0].where(), name)
			}
			if err := checkProxyTokens(t.ProxyCommand); err != nil {
				return t, fmt.Errorf("%s: ProxyCommand for %s: %v", p[0].where(), name, err)
			}
		} else {
			for _, hop := range strings.Split(p[0].value, ",") {
				if hop = strings.TrimSpace(hop); hop != "" {
					t.ProxyJump = append(t.ProxyJump, hop)
				}
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
	if af := strings.ToLower(first("addressfamily")); af == "inet" || af == "inet6" {
		t.AddressFamily = af
	}
	return t, nil
}

// splitAlias splits [user@]host[:port] as ssh's command line does; name is
// what ssh_config's Host lines and %n see.
func splitAlias(alias string) (user, name string, port int) {
	name = alias
	if u, h, ok := strings.Cut(name, "@"); ok {
		user, name = u, h
	}
	if h, p, ok := splitPort(name); ok {
		name, port = h, p
	}
	return user, name, port
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
