package notify

import (
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/inifile"
)

// Config is [notify].
type Config struct {
	Targets  Targets
	Params   Params
	Sendmail []string // the command and its arguments
}

// DefaultSendmail is how mail is handed over, as every MTA's sendmail
// takes it: recipients from the To header (-t), a lone dot not special (-i).
var DefaultSendmail = []string{"/usr/sbin/sendmail", "-t", "-i"}

// MaxOutboxAge is how long a message waits for a target that refuses it
// before it is dropped (and the drop reported).
const MaxOutboxAge = 7 * 24 * time.Hour

// DefaultConfig is [notify] when the file leaves it out: no targets.
func DefaultConfig() Config {
	return Config{Params: DefaultParams, Sendmail: DefaultSendmail}
}

// ReadConfig reads [notify] into c. Every target is checked here, so a
// typo is a config error naming the line, not a failure each run.
// historyOn says whether [history] has a database: notifications come
// from it.
func ReadConfig(f *inifile.File, c *Config, historyOn bool) error {
	sec := f.Section("notify")
	if urls, ok := sec.List("webhook"); ok {
		for _, u := range urls {
			if err := checkURL(u); err != "" {
				return sec.ErrorAt("webhook", "%q: %s", RedactURL(u), err)
			}
			if !slices.Contains(c.Targets.Webhooks, u) {
				c.Targets.Webhooks = append(c.Targets.Webhooks, u)
			}
		}
	}
	if list, ok := sec.List("mail_to"); ok {
		addrs, err := ParseMailAddresses(list)
		if err != nil {
			return sec.ErrorAt("mail_to", "%v", err)
		}
		c.Targets.MailTo = addrs
	}
	if v, ok := sec.String("mail_users"); ok && v != "" {
		domain, found := strings.CutPrefix(v, "@")
		if !found || !mailDomain(domain) {
			return sec.ErrorAt("mail_users", "%q: want @ and a mail domain (e.g. @example.org): each holder is mailed as USER@example.org", v)
		}
		c.Targets.UserDomain = domain
	}
	if v, ok := sec.String("mail_from"); ok && v != "" {
		if _, err := ParseMailAddresses([]string{v}); err != nil {
			return sec.ErrorAt("mail_from", "%v", err)
		}
		c.Targets.MailFrom = v
	}
	if v, ok := sec.String("sendmail"); ok {
		argv := strings.Fields(v)
		if len(argv) == 0 {
			return sec.ErrorAt("sendmail", "empty: leave the key out for %s", strings.Join(DefaultSendmail, " "))
		}
		c.Sendmail = argv
	}
	if v, ok := sec.String("page_url"); ok && v != "" {
		if err := checkURL(v); err != "" {
			return sec.ErrorAt("page_url", "%q: %s", v, err)
		}
		c.Targets.PageURL = v
	}
	if list, ok := sec.List("events"); ok {
		events, err := parseKinds(list)
		if err != nil {
			return sec.ErrorAt("events", "%v", err)
		}
		c.Params.Events = events
	}
	if err := sec.Bool("commands", &c.Targets.Commands); err != nil {
		return err
	}
	day := 24 * time.Hour
	if err := sec.Duration("host_down_after", inifile.Limits[time.Duration]{Min: 0, Max: 30 * day,
		Want: "a duration from 0 to 30d (e.g. 15m)"}, &c.Params.HostDownAfter); err != nil {
		return err
	}
	if err := sec.Duration("remind_after", inifile.Limits[time.Duration]{Min: 0, Max: 365 * day,
		Want: "a duration up to 365d (e.g. 24h), or 0 for never"}, &c.Params.RemindAfter); err != nil {
		return err
	}
	if err := sec.Duration("degraded_after", inifile.Limits[time.Duration]{Min: 0, Max: 30 * day,
		Want: "a duration from 0 to 30d (e.g. 1h)"}, &c.Params.DegradedAfter); err != nil {
		return err
	}
	if err := sec.Duration("unreserved_after", inifile.Limits[time.Duration]{Min: 0, Max: 30 * day,
		Want: "a duration from 0 to 30d (e.g. 10m), or 0 to tell the first snapshot that shows it"}, &c.Params.UnreservedAfter); err != nil {
		return err
	}
	if c.Params.RemindAfter > 0 && c.Params.RemindAfter < 10*time.Minute {
		return sec.ErrorAt("remind_after", "%s is a reminder every few runs: want 10m or more, or 0 for never", c.Params.RemindAfter)
	}
	if !c.Targets.Empty() && !historyOn {
		return sec.ErrorAt(firstKey(sec, "webhook", "mail_to", "mail_users"),
			"notifications come from the history, and [history] db is empty: set it, or remove [notify]'s targets")
	}
	return nil
}

func firstKey(sec inifile.Section, keys ...string) string {
	for _, k := range keys {
		if v, ok := sec.String(k); ok && v != "" {
			return k
		}
	}
	return keys[0]
}

// checkURL says what is wrong with an http(s) URL, or "".
func checkURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "not a URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return "want an http:// or https:// URL"
	case u.Host == "":
		return "no host in the URL"
	}
	return ""
}

func mailDomain(d string) bool {
	if d == "" || len(d) > 253 || strings.HasPrefix(d, ".") || strings.HasSuffix(d, ".") || strings.Contains(d, "..") {
		return false
	}
	for _, c := range d {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}
