package remote

import (
	"fmt"
	"slices"
	"strings"
)

// keywordPolicy says, for every ssh_config keyword OpenSSH knows (9.2 to
// 10.2, Debian's GSSAPI patch included), whether fetch can connect the way
// that value asks. A rule returns why it cannot, or "" when fetch does what
// the value asks or the value cannot change where fetch connects, whose keys
// it trusts, or how it proves who it is. Only the value that applies to a
// host is checked (the first one obtained, as ssh uses it), so that Debian's
// stock /etc/ssh/ssh_config and the usual user files load as they are.
var keywordPolicy = map[string]func(value string) string{
	// What Resolve and dial implement.
	// Match lines never reach these rules: load checks them (checkMatch).
	"host": supported, "match": supported, "hostname": supported, "port": supported,
	"user": supported, "identityfile": supported, "identitiesonly": supported,
	"proxyjump": supported, "proxycommand": supported, "userknownhostsfile": supported,
	"hostkeyalias": supported, "addressfamily": oneOf("is not any, inet or inet6", "any", "inet", "inet6"),
	"ignoreunknown": supported, "include": supported,

	// What a batch poller may ignore: comfort and interactive features,
	// forwarding it never asks for, auth methods it does not offer besides
	// keys, retries and timeouts that fetch's own timeout replaces, and
	// options that only make ssh more lenient than fetch is (fetch's own
	// strict_host_key_checking governs host keys; it never skips the check).
	"sendenv": supported, "setenv": supported, "serveraliveinterval": supported,
	"serveralivecountmax": supported, "tcpkeepalive": supported, "connecttimeout": supported,
	"connectionattempts": supported, "hashknownhosts": supported, "compression": supported,
	"loglevel": supported, "logverbose": supported, "syslogfacility": supported,
	"batchmode": supported, "forwardagent": supported, "forwardx11": supported,
	"forwardx11trusted": supported, "forwardx11timeout": supported, "xauthlocation": supported,
	"localforward": supported, "remoteforward": supported, "dynamicforward": supported,
	"clearallforwardings": supported, "exitonforwardfailure": supported, "gatewayports": supported,
	"streamlocalbindmask": supported, "streamlocalbindunlink": supported, "permitremoteopen": supported,
	"tunnel": supported, "tunneldevice": supported, "escapechar": supported,
	"enableescapecommandline": supported, "requesttty": supported, "remotecommand": supported,
	"localcommand": supported, "permitlocalcommand": supported, "sessiontype": supported,
	"stdinnull": supported, "forkafterauthentication": supported, "visualhostkey": supported,
	"fingerprinthash": supported, "controlmaster": supported, "controlpath": supported,
	"controlpersist": supported, "addkeystoagent": supported, "numberofpasswordprompts": supported,
	"passwordauthentication": supported, "kbdinteractiveauthentication": supported,
	"kbdinteractivedevices": supported, "hostbasedauthentication": supported,
	"hostbasedacceptedalgorithms": supported, "enablesshkeysign": supported,
	"gssapiauthentication": supported, "gssapidelegatecredentials": supported,
	"gssapikeyexchange": supported, "gssapiclientidentity": supported,
	"gssapiserveridentity": supported, "gssapirenewalforcesrekey": supported,
	"gssapitrustdns": supported, "gssapikexalgorithms": supported,
	"checkhostip": supported, "updatehostkeys": supported, "stricthostkeychecking": supported,
	"nohostauthenticationforlocalhost": supported, "casignaturealgorithms": supported,
	"securitykeyprovider": supported, "rekeylimit": supported, "ipqos": supported,
	"obscurekeystroketiming": supported, "channeltimeout": supported, "tag": supported,
	"versionaddendum": supported, "warnweakcrypto": supported,
	"canonicaldomains": supported, "canonicalizefallbacklocal": supported,
	"canonicalizemaxdots": supported, "canonicalizepermittedcnames": supported,
	// Obsolete: ssh itself ignores them.
	"protocol": supported, "cipher": supported, "fallbacktorsh": supported,
	"globalknownhostsfile2": supported, "rhostsauthentication": supported,
	"userknownhostsfile2": supported, "useroaming": supported, "usersh": supported,
	"useprivilegedport": supported, "afstokenpassing": supported,
	"kerberosauthentication": supported, "kerberostgtpassing": supported,
	"rsaauthentication": supported, "rhostsrsaauthentication": supported,
	"compressionlevel": supported,

	// Where fetch would connect from, or to, otherwise than ssh.
	"proxyusefdpass":       oneOf("fetch speaks through the ProxyCommand's stdin and stdout and cannot take a passed socket", "no"),
	"bindaddress":          unsupported("fetch connects from the default address; remove it for these hosts"),
	"bindinterface":        unsupported("fetch connects through the default interface; remove it for these hosts"),
	"canonicalizehostname": oneOf("fetch does not canonicalize host names: give the full name in HostName", "no", "none"),
	"refuseconnection":     oneOf("ssh refuses to connect to this host, and so does fetch", "no"),
	"identityagent":        oneOf("fetch asks only the agent at $SSH_AUTH_SOCK: set SSH_AUTH_SOCK for fetch instead", "SSH_AUTH_SOCK", "$SSH_AUTH_SOCK", "${SSH_AUTH_SOCK}"),
	"certificatefile":      unsupportedUnlessNone("fetch cannot log in with a certificate: give it a plain key (IdentityFile) or use ssh-agent"),
	"pkcs11provider":       unsupportedUnlessNone("fetch cannot use PKCS#11 keys: give it a key file or use ssh-agent"),
	"pubkeyauthentication": oneOf("fetch logs in with keys only, which this turns off", "yes", "unbound", "host-bound"),
	"preferredauthentications": func(v string) string {
		for _, m := range strings.Split(strings.ToLower(v), ",") {
			if strings.TrimSpace(m) == "publickey" {
				return ""
			}
		}
		return "fetch logs in with keys only (publickey), which this list leaves out"
	},
	// Whose host keys fetch would trust otherwise than ssh.
	"globalknownhostsfile": onlyFiles("fetch reads only UserKnownHostsFile (or known_hosts in config.ini): put these host keys there", "none", "/dev/null"),
	"knownhostscommand":    unsupportedUnlessNone("fetch does not run KnownHostsCommand: put the host keys in a known_hosts file"),
	"revokedhostkeys":      unsupportedUnlessNone("fetch does not check revoked host keys, so it would trust a key this file revokes"),
	"verifyhostkeydns":     oneOf("fetch does not trust host keys from DNS (SSHFP): put them in known_hosts", "no", "ask"),
	"requiredrsasize":      atMost1024,
	// Algorithm restrictions: fetch offers x/crypto/ssh's defaults. Adding to
	// the defaults (+) or reordering them (^) restricts nothing.
	"ciphers":                  algorithms,
	"kexalgorithms":            algorithms,
	"macs":                     algorithms,
	"hostkeyalgorithms":        algorithms,
	"pubkeyacceptedalgorithms": algorithms,
}

// keywordAliases are OpenSSH's other names for keywords.
var keywordAliases = map[string]string{
	"challengeresponseauthentication": "kbdinteractiveauthentication",
	"skeyauthentication":              "kbdinteractiveauthentication",
	"tisauthentication":               "kbdinteractiveauthentication",
	"pubkeyacceptedkeytypes":          "pubkeyacceptedalgorithms",
	"hostbasedkeytypes":               "hostbasedacceptedalgorithms",
	"dsaauthentication":               "pubkeyauthentication",
	"identityfile2":                   "identityfile",
	"keepalive":                       "tcpkeepalive",
	"smartcarddevice":                 "pkcs11provider",
}

func supported(string) string { return "" }

func unsupported(why string) func(string) string {
	return func(string) string { return why }
}

func unsupportedUnlessNone(why string) func(string) string {
	return func(v string) string {
		if strings.EqualFold(v, "none") {
			return ""
		}
		return why
	}
}

// oneOf accepts the values given (any case) and refuses the others, saying why.
func oneOf(why string, values ...string) func(string) string {
	return func(v string) string {
		for _, ok := range values {
			if strings.EqualFold(v, ok) {
				return ""
			}
		}
		return why
	}
}

// onlyFiles accepts a file list that names none but the files given.
func onlyFiles(why string, harmless ...string) func(string) string {
	return func(v string) string {
		for _, f := range strings.Fields(v) {
			if !slices.Contains(harmless, strings.ToLower(f)) {
				return why
			}
		}
		return ""
	}
}

func algorithms(v string) string {
	if strings.HasPrefix(v, "+") || strings.HasPrefix(v, "^") {
		return ""
	}
	return "fetch cannot restrict algorithms: it offers x/crypto/ssh's defaults; remove the line for these hosts (adding with + or reordering with ^ is fine)"
}

func atMost1024(v string) string {
	n := 0
	for _, r := range v {
		if r < '0' || r > '9' {
			return "not a number"
		}
		n = n*10 + int(r-'0')
		if n > 1024 {
			return "fetch does not enforce a minimum RSA key size above 1024 bits"
		}
	}
	return ""
}

// matchHint ends every refused Match line's error.
const matchHint = "use a Host block, or point ssh_config in config.ini at a file for fetch without it"

// matchCriteria are the criteria OpenSSH's ssh_config Match takes (9.2 to
// 10.2), each with what fetch lacks to evaluate it. all and host are the
// ones fetch evaluates, and only alone (see matchRule).
var matchCriteria = map[string]string{
	"all":          "",
	"host":         "",
	"canonical":    " (it does not canonicalize host names)",
	"final":        " (it does not canonicalize host names and makes no final pass)",
	"exec":         " (it never runs the command)",
	"localnetwork": "",
	"originalhost": "",
	"user":         "",
	"localuser":    "",
	"tagged":       "",
	"command":      "",
	"version":      "",
	"sessiontype":  "",
}

// A matchRule is what fetch makes of one Match line.
type matchRule struct {
	// patterns are the Host patterns of an accepted line: * for Match all,
	// the comma-separated list of Match host.
	patterns []string
	// final: the line has a final criterion (not negated). ssh applies such
	// a block only in its final pass, after every other line was read.
	final bool
	// refused says why fetch cannot evaluate the line ("" when accepted).
	refused string
}

// checkMatch reads a Match line's arguments (quotes removed, the comment
// cut off; see matchArgs). fetch accepts "Match all" and "Match host
// PATTERN[,PATTERN...]" (keywords in any case, patterns with ! and
// wildcards) and evaluates them as Host * and Host PATTERN... Every other
// criterion, and any two together, depends on something fetch does not know
// or do (the local user, the remote user, a command's exit status, ssh's
// canonicalisation pass), so a block under it would be applied to hosts ssh
// would not apply it to, or the other way round: it is refused, for every
// host, whether the block would apply or not.
func checkMatch(args []string) matchRule {
	type criterion struct{ name, arg string }
	var crits []criterion
	var r matchRule
	for i := 0; i < len(args); i++ {
		c := criterion{name: args[i]}
		switch name := strings.ToLower(strings.TrimPrefix(c.name, "!")); name {
		case "all", "canonical":
		case "final":
			r.final = r.final || !strings.HasPrefix(c.name, "!")
		default:
			if _, known := matchCriteria[name]; known && i+1 < len(args) {
				i++
				c.arg = args[i]
			}
		}
		crits = append(crits, c)
	}
	if len(crits) == 0 {
		r.refused = "a Match line needs a criterion: Match all, or Match host PATTERN[,PATTERN...]"
		return r
	}
	for _, c := range crits {
		name := strings.ToLower(c.name)
		why, known := matchCriteria[strings.TrimPrefix(name, "!")]
		switch {
		case !known:
			r.refused = fmt.Sprintf("%s is not a Match criterion ssh knows (Match host takes one comma-separated list: Match host a,b)", c.name)
		case strings.HasPrefix(name, "!"):
			r.refused = fmt.Sprintf("fetch cannot evaluate Match %s (negate the pattern instead: Match host !a,*); %s", name, matchHint)
		case name != "all" && name != "host":
			r.refused = fmt.Sprintf("fetch cannot evaluate Match %s%s; %s", name, why, matchHint)
		case name == "host" && c.arg == "":
			r.refused = "Match host needs a pattern list"
		default:
			continue
		}
		return r
	}
	if len(crits) > 1 {
		r.refused = fmt.Sprintf("fetch cannot evaluate Match %s combined with %s: it takes Match all or Match host alone; %s",
			strings.ToLower(crits[0].name), strings.ToLower(crits[1].name), matchHint)
		return r
	}
	if strings.EqualFold(crits[0].name, "all") {
		r.patterns = []string{"*"}
		return r
	}
	for _, p := range strings.Split(crits[0].arg, ",") {
		switch {
		case p == "":
		case strings.ContainsAny(p, " \t\"'\\"):
			r.refused = fmt.Sprintf("host pattern %q: a host name has no spaces, quotes or backslashes", p)
			return r
		default:
			r.patterns = append(r.patterns, p)
		}
	}
	if len(r.patterns) == 0 {
		r.refused = "Match host needs a pattern list"
	}
	return r
}

// matchArgs splits the rest of a Match line as OpenSSH does (argv_split):
// on blanks, with "double" and 'single' quotes and backslash escapes, up to
// a word that starts with #.
func matchArgs(s string) ([]string, error) {
	var out []string
	for i := 0; i < len(s); {
		if s[i] == ' ' || s[i] == '\t' {
			i++
			continue
		}
		if s[i] == '#' {
			break
		}
		var arg strings.Builder
		var quote byte
		for ; i < len(s); i++ {
			c := s[i]
			switch {
			case c == '\\' && i+1 < len(s) && (s[i+1] == '\'' || s[i+1] == '"' || s[i+1] == '\\' || (quote == 0 && s[i+1] == ' ')):
				i++
				arg.WriteByte(s[i])
				continue
			case quote == 0 && (c == ' ' || c == '\t'):
			case quote == 0 && (c == '"' || c == '\''):
				quote = c
				continue
			case quote != 0 && c == quote:
				quote = 0
				continue
			default:
				arg.WriteByte(c)
				continue
			}
			break
		}
		if quote != 0 {
			return nil, fmt.Errorf("unterminated quote")
		}
		out = append(out, arg.String())
	}
	return out, nil
}
