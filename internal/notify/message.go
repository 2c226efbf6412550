package notify

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"mime"
	"mime/quotedprintable"
	"net/mail"
	"slices"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/bytesize"
	"github.com/gpumon/gpumon/internal/hosttext"
)

// Targets are where messages go: [notify] in config.ini.
type Targets struct {
	Webhooks []string
	MailTo   []string // the admins, bare addresses: every event, one mail a run
	// UserDomain mails the holders of an idle-held GPU as user@UserDomain
	// ("" for none).
	UserDomain string
	MailFrom   string // "" lets sendmail choose (the account running render)
	Commands   bool   // put the holders' command lines in messages
	PageURL    string // the status page, linked from every message
}

// Empty reports whether nothing is to be told.
func (t Targets) Empty() bool {
	return len(t.Webhooks) == 0 && len(t.MailTo) == 0 && t.UserDomain == ""
}

// Item is one message for one target, as the outbox keeps it.
type Item struct {
	ID int64
	// Target is "webhook URL" or "mail ADDR[, ADDR...]": messages to one
	// target go in order, and one that fails holds back the rest.
	Target    string
	Summary   string // one line naming the message, for reports
	Body      []byte // the JSON to POST, or the whole mail for sendmail
	created   time.Time
	attempts  int
	lastError string
}

// Kind is the target's kind, "webhook" or "mail".
func (it Item) Kind() string { k, _, _ := strings.Cut(it.Target, " "); return k }

// dest is the target's URL or addresses.
func (it Item) dest() string { _, d, _ := strings.Cut(it.Target, " "); return d }

// WebhookTarget and MailTarget name targets as Item.Target does.
func WebhookTarget(url string) string  { return "webhook " + url }
func MailTarget(addrs []string) string { return "mail " + strings.Join(addrs, ", ") }

// Configured reports whether target is one of t's: a webhook or the
// admins' list as configured, or a holder's address in UserDomain. Items
// for any other (taken out of config.ini since) are not sent.
func (t Targets) Configured(target string) bool {
	kind, dest, _ := strings.Cut(target, " ")
	switch kind {
	case "webhook":
		return slices.Contains(t.Webhooks, dest)
	case "mail":
		if len(t.MailTo) > 0 && target == MailTarget(t.MailTo) {
			return true
		}
		user, domain, ok := strings.Cut(dest, "@")
		return ok && t.UserDomain != "" && domain == t.UserDomain && notMailable(user) == ""
	}
	return false
}

// Message limits: a command line or a user list in a message is cut, so a
// message stays small whatever the hosts print.
const (
	maxCommand  = 200
	maxCommands = 8
	maxUsers    = 8
	maxName     = 64
)

// maxWebhookEvents is the most events a run posts one by one: more (a
// first run over a fleet with many idle GPUs, a rack gone down) go in one
// digest, so a chat channel gets one message, not hundreds.
const maxWebhookEvents = 20

// Route turns a run's events into messages: each event to each webhook
// (or one digest of them all, past maxWebhookEvents);
// all of them in one mail to the admins; to each user mail_users reaches
// (see userRecipients: the holder of an idle-held GPU, the holder of a GPU
// in someone else's reservation and that reservation's owner), one mail
// about their GPUs. A user that cannot be mailed (no user name, one that is not a mail
// local part, root) is a problem, returned for the caller to report; the
// admins are told anyway.
func Route(events []Event, t Targets, now time.Time, loc *time.Location, sender string) (items []Item, problems []string) {
	if len(events) == 0 {
		return nil, nil
	}
	for _, u := range t.Webhooks {
		if len(events) > maxWebhookEvents {
			items = append(items, Item{Target: WebhookTarget(u), Summary: digestSubject(events),
				Body: webhookDigestBody(events, t, loc), created: now})
			continue
		}
		for _, e := range events {
			items = append(items, Item{Target: WebhookTarget(u), Summary: e.Summary(), Body: WebhookBody(e, t, loc), created: now})
		}
	}
	if len(t.MailTo) > 0 {
		subject := digestSubject(events)
		var body strings.Builder
		eventLines(&body, events, loc, t.Commands)
		items = append(items, Item{Target: MailTarget(t.MailTo), Summary: subject,
			Body: Mail(t.MailTo, t.MailFrom, subject, body.String(), t.PageURL, sender, now), created: now})
	}
	if t.UserDomain != "" {
		mine := map[string][]Event{}
		for _, e := range events {
			for _, u := range userRecipients(e) {
				if why := notMailable(u); why != "" {
					problems = append(problems, fmt.Sprintf("%s is not mailed about GPU %s on %s: %s",
						quoteUser(u), e.GPU, e.Host, why))
					continue
				}
				mine[u] = append(mine[u], e)
			}
		}
		users := make([]string, 0, len(mine))
		for u := range mine {
			users = append(users, u)
		}
		slices.Sort(users)
		for _, u := range users {
			to := []string{u + "@" + t.UserDomain}
			subject, body := userMail(u, mine[u], loc, t.Commands)
			items = append(items, Item{Target: MailTarget(to), Summary: subject,
				Body: Mail(to, t.MailFrom, subject, body, t.PageURL, sender, now), created: now})
		}
	}
	return items, problems
}

func quoteUser(u string) string {
	if u == "" {
		return "the holder (user unknown)"
	}
	return fmt.Sprintf("user %q", hosttext.Clip(hosttext.Printable(u), maxName))
}

// notMailable says why user cannot be mailed as user@domain, or "". A mail
// local part is a dot-atom (RFC 5322); ps prints a uid, all digits, where
// the name is too long, and root is nobody in particular (a container's
// processes run as root).
func notMailable(user string) string {
	switch {
	case user == "":
		return "ps did not say who runs the process"
	case user == "root":
		return "root is not a person; the admins are told"
	case allDigits(user):
		return "ps printed a uid, not a name"
	case len(user) > 64:
		return "the name is longer than a mail local part may be"
	}
	if !dotAtom(user) {
		return "the name is not a mail local part"
	}
	return ""
}

func dotAtom(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-/=?^_`{|}~.", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// Summary is one line naming the event, for reports on stderr.
func (e Event) Summary() string {
	s := string(e.Kind) + " " + string(e.State)
	if e.reminder {
		s += " (reminder)"
	}
	switch {
	case e.GPU != "":
		s += fmt.Sprintf(": %s GPU %s", e.Host, e.GPU)
	case e.Host != "":
		s += ": " + e.Host
	}
	return hosttext.Printable(s)
}

// title is the event in a few words, for a mail's subject.
func (e Event) title() string {
	host, gpu := name(e.Host), name(e.GPU)
	switch {
	case isHealthKind(e.Kind):
		return healthTitle(e)
	case e.Kind == unreservedUse:
		return unreservedTitle(e)
	case e.Kind == idleHeld && e.State == Firing && len(e.Working) > 0:
		return fmt.Sprintf("GPU %s on %s idle-held by %s for %s%s", gpu, host, users(e.Users), hours(e.Duration()), e.whileWorking())
	case e.Kind == idleHeld && e.State == Firing:
		return fmt.Sprintf("GPU %s on %s idle-held for %s", gpu, host, hours(e.Duration()))
	case e.Kind == idleHeld:
		return fmt.Sprintf("GPU %s on %s released", gpu, host)
	case e.Kind == hostDown && e.State == Firing:
		return fmt.Sprintf("%s down for %s", host, hours(e.Duration()))
	case e.Kind == hostDown:
		return fmt.Sprintf("%s answers again", host)
	case e.Kind == allDown && e.State == Firing:
		return "no host answers"
	case e.Kind == allDown:
		return "hosts answer again"
	}
	return "test message"
}

// Text is the event as one sentence. Values from hosts are made printable
// and cut; the webhook form escapes them further (see WebhookBody).
func (e Event) Text(loc *time.Location, commands bool) string {
	host, gpu := name(e.Host), name(e.GPU)
	since := clock(e.Since, loc)
	still := ""
	if e.reminder {
		still = "Still: "
	}
	var s string
	switch {
	case isHealthKind(e.Kind):
		s = healthText(e, loc)
	case e.Kind == unreservedUse:
		s = unreservedText(e, loc, commands)
	case e.Kind == idleHeld && e.State == Firing:
		model := ""
		if e.Model != "" {
			model = " (" + name(e.Model) + ")"
		}
		s = fmt.Sprintf("%sGPU %s on %s%s has been held idle by %s for %s (since %s), %s in use%s.",
			still, gpu, host, model, users(e.Users), hours(e.Duration()), since, mib(e.MemMiB), e.whileWorking())
		if commands && len(e.Commands) > 0 {
			s += " Processes: " + commandList(e.Commands) + "."
		}
	case e.Kind == idleHeld:
		s = fmt.Sprintf("GPU %s on %s is no longer idle-held by %s (it was for %s, since %s).",
			gpu, host, users(e.Users), hours(e.Duration()), since)
	case e.Kind == hostDown && e.State == Firing:
		s = fmt.Sprintf("%sHost %s has not answered for %s (since %s).", still, host, hours(e.Duration()), since)
	case e.Kind == hostDown:
		s = fmt.Sprintf("Host %s answers again, after %s down (since %s).", host, hours(e.Duration()), since)
	case e.Kind == allDown && e.State == Firing:
		s = fmt.Sprintf("%sNo host answers: all %d hosts are down (since %s). Look at the monitor machine's network and fetch first.",
			still, e.Hosts, since)
	case e.Kind == allDown:
		s = fmt.Sprintf("Hosts answer again, after %s with none answering (since %s).", hours(e.Duration()), since)
	default:
		s = "A test message from gpumon: this target works."
	}
	return s
}

// whileWorking names, on a shared GPU, the holders who use it while the
// episode's holder does not; "" on a GPU nobody uses.
func (e Event) whileWorking() string {
	switch len(e.Working) {
	case 0:
		return ""
	case 1:
		return ", while " + users(e.Working) + " uses it"
	}
	return ", while " + users(e.Working) + " use it"
}

// name makes a value from a host (or config.ini) safe to print on one line.
func name(s string) string { return hosttext.Clip(hosttext.Printable(s), maxName) }

// names are the first maxUsers of us, each printable and cut.
func names(us []string) []string {
	var out []string
	for i, u := range us {
		if i == maxUsers {
			break
		}
		out = append(out, name(u))
	}
	return out
}

func users(us []string) string {
	if len(us) == 0 {
		return "an unknown user"
	}
	var out []string
	for i, u := range us {
		if i == maxUsers {
			out = append(out, fmt.Sprintf("%d more", len(us)-i))
			break
		}
		if u == "" {
			u = "(unknown)"
		}
		out = append(out, name(u))
	}
	return strings.Join(out, ", ")
}

func commandList(cs []string) string {
	var out []string
	for i, c := range cs {
		if i == maxCommands {
			out = append(out, fmt.Sprintf("%d more", len(cs)-i))
			break
		}
		out = append(out, "`"+strings.ReplaceAll(hosttext.Clip(hosttext.Printable(c), maxCommand), "`", "'")+"`")
	}
	return strings.Join(out, ", ")
}

// hours is a duration as people say it: "45 min", "5.2 h", "3.1 days".
func hours(d time.Duration) string {
	switch {
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%.1f h", d.Hours())
	}
	return fmt.Sprintf("%.1f days", d.Hours()/24)
}

func mib(m float64) string { return bytesize.AboutMiB(m) }

// clock is a time in the lab's zone, with the zone named.
func clock(t time.Time, loc *time.Location) string {
	if t.IsZero() {
		return "an unknown time"
	}
	return t.In(loc).Format("2006-01-02 15:04 MST")
}

// webhookBody is what a webhook receives: text for Slack, Mattermost and
// the like (their "incoming webhook" format), and the same facts as
// fields for anything that routes on them.
type webhookBody struct {
	Text     string   `json:"text"`
	Event    Kind     `json:"event"`
	State    State    `json:"state"`
	Reminder bool     `json:"reminder"`
	Host     string   `json:"host,omitempty"`
	GPU      string   `json:"gpu,omitempty"`
	Model    string   `json:"model,omitempty"`
	Users    []string `json:"users,omitempty"`
	Working  []string `json:"working,omitempty"` // idle_held on a shared GPU: its other holders, who use it
	Since    string   `json:"since,omitempty"`
	At       string   `json:"at,omitempty"`
	Hours    float64  `json:"hours"`
	MemMiB   *float64 `json:"memory_mib,omitempty"`
	Hosts    int      `json:"hosts,omitempty"`
	Commands []string `json:"commands,omitempty"`
	Page     string   `json:"page,omitempty"`

	// gpu_failed and gpu_degraded: the conditions found
	Findings []webhookFinding `json:"findings,omitempty"`

	// unreserved_use: the reservation its holder (users) uses the GPU in
	Reservation *webhookReservation `json:"reservation,omitempty"`
}

// webhookDigest is a run's events in one POST: the text lists the first
// maxWebhookEvents, events holds the first maxDigestEvents as WebhookBody
// would, more counts the rest.
type webhookDigest struct {
	Text   string            `json:"text"`
	Event  string            `json:"event"` // "digest"
	Events []json.RawMessage `json:"events"`
	More   int               `json:"more,omitempty"` // events not in Events
	Page   string            `json:"page,omitempty"`
}

// maxDigestEvents is the most events a digest carries as fields: a first
// run over a large fleet would otherwise post megabytes (nginx in front of
// a receiver refuses a body over 1 MB by default).
const maxDigestEvents = 100

// webhookDigestBody is the JSON for many events at once.
func webhookDigestBody(events []Event, t Targets, loc *time.Location) []byte {
	var text strings.Builder
	text.WriteString(slackEscape(strings.TrimPrefix(digestSubject(events), "[gpumon] ")) + ":")
	d := webhookDigest{Event: "digest", Page: t.PageURL}
	for i, e := range events {
		if i < maxWebhookEvents {
			text.WriteString("\n• " + slackEscape(e.Text(loc, false)))
		}
		if i < maxDigestEvents {
			d.Events = append(d.Events, WebhookBody(e, Targets{Commands: t.Commands}, loc))
		} else {
			d.More++
		}
	}
	if n := len(events) - maxWebhookEvents; n > 0 {
		fmt.Fprintf(&text, "\n… and %d more", n)
	}
	if t.PageURL != "" {
		text.WriteString("\n" + slackEscape(t.PageURL))
	}
	d.Text = text.String()
	out, err := json.Marshal(d)
	if err != nil {
		panic(err)
	}
	return out
}

// WebhookBody is the JSON for e. In text, Slack reads <...> as a link or a
// mention (<!channel> pings everyone) and & as an entity: those three are
// escaped as Slack asks, so no name from a host can ping or link.
func WebhookBody(e Event, t Targets, loc *time.Location) []byte {
	text := slackEscape(e.Text(loc, t.Commands))
	if t.PageURL != "" {
		text += " " + slackEscape(t.PageURL)
	}
	b := webhookBody{Text: text, Event: e.Kind, State: e.State, Reminder: e.reminder,
		Host: name(e.Host), GPU: name(e.GPU), Model: name(e.Model), Hosts: e.Hosts, Page: t.PageURL,
		Hours: math.Round(e.Duration().Hours()*100) / 100}
	b.Users, b.Working = names(e.Users), names(e.Working)
	if !e.Since.IsZero() {
		b.Since = e.Since.UTC().Format(time.RFC3339)
	}
	if !e.At.IsZero() {
		b.At = e.At.UTC().Format(time.RFC3339)
	}
	if e.Kind == idleHeld || e.Kind == unreservedUse {
		m := e.MemMiB
		b.MemMiB = &m
	}
	if e.Kind == unreservedUse {
		b.Reservation = webhookReservationOf(e.Reservation)
	}
	if isHealthKind(e.Kind) {
		b.Findings = webhookFindings(e.Findings)
	}
	if t.Commands && e.State == Firing {
		for i, c := range e.Commands {
			if i == maxCommands {
				break
			}
			b.Commands = append(b.Commands, hosttext.Clip(hosttext.Printable(c), maxCommand))
		}
	}
	out, err := json.Marshal(b)
	if err != nil {
		panic(err) // strings, numbers and bools only
	}
	return out
}

var slackEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

func slackEscape(s string) string { return slackEscaper.Replace(s) }

// digestSubject names a run's events in a subject line.
func digestSubject(events []Event) string {
	if len(events) == 1 {
		e := events[0]
		prefix := ""
		switch {
		case e.reminder:
			prefix = "still: "
		case e.State == resolved:
			prefix = "resolved: "
		}
		return "[gpumon] " + prefix + e.title()
	}
	counts := map[string]int{}
	var keys []string
	for _, e := range events {
		k := string(e.Kind) + " " + string(e.State)
		if counts[k] == 0 {
			keys = append(keys, k)
		}
		counts[k]++
	}
	words := map[string][2]string{ // one, many
		"idle_held firing": {"GPU idle-held", "GPUs idle-held"}, "idle_held resolved": {"GPU released", "GPUs released"},
		"host_down firing": {"host down", "hosts down"}, "host_down resolved": {"host back", "hosts back"},
		"all_down firing": {"no host answers", "no host answers"}, "all_down resolved": {"hosts answer again", "hosts answer again"},
		"gpu_failed firing": {"GPU failed", "GPUs failed"}, "gpu_failed resolved": {"GPU no longer failed", "GPUs no longer failed"},
		"gpu_degraded firing": {"GPU degraded", "GPUs degraded"}, "gpu_degraded resolved": {"GPU no longer degraded", "GPUs no longer degraded"},
		"unreserved_use firing":   {"GPU used in another's reservation", "GPUs used in others' reservations"},
		"unreserved_use resolved": {"reserved GPU no longer used by another", "reserved GPUs no longer used by others"},
		"test firing":             {"test", "tests"},
	}
	var parts []string
	for _, k := range keys {
		w := words[k][1]
		if counts[k] == 1 {
			w = words[k][0]
		}
		parts = append(parts, fmt.Sprintf("%d %s", counts[k], w))
	}
	return "[gpumon] " + strings.Join(parts, ", ")
}

// maxMailLines is the most events a mail lists; the page has the rest.
const maxMailLines = 100

func eventLines(b *strings.Builder, events []Event, loc *time.Location, commands bool) {
	for i, e := range events {
		if i == maxMailLines {
			fmt.Fprintf(b, "- ... and %d more: see the status page\n", len(events)-i)
			break
		}
		b.WriteString("- " + e.Text(loc, commands) + "\n")
	}
}

// userMail is the mail to one user about their GPUs: those they hold
// idle, those they use in someone else's reservation, and those reserved
// for them that someone else uses.
func userMail(user string, events []Event, loc *time.Location, commands bool) (subject, body string) {
	var idle, using, theirs []Event
	for _, e := range events {
		switch {
		case e.Kind == idleHeld:
			idle = append(idle, e)
		case e.Reservation.owner() == user:
			theirs = append(theirs, e)
		default:
			using = append(using, e)
		}
	}
	var b strings.Builder
	b.WriteString("Hello,\n")
	if len(idle) > 0 {
		b.WriteString("\nyour processes hold GPUs that have done (almost) no work for a while:\n\n")
		eventLines(&b, idle, loc, commands)
		b.WriteString("\nOthers are waiting for GPUs. If you no longer need these, please end the\nprocesses that hold them. If they are about to work again, ignore this mail.\n")
	}
	if len(using) > 0 {
		b.WriteString("\nyour processes use GPUs reserved for someone else:\n\n")
		eventLines(&b, using, loc, commands)
		b.WriteString("\nPlease end them, or ask the reservation's owner, named above, whether you may\ngo on. The owner is told too.\n")
	}
	if len(theirs) > 0 {
		b.WriteString("\nGPUs reserved for you are, or were, used by someone else:\n\n")
		eventLines(&b, theirs, loc, commands)
		b.WriteString("\nThe holder is told too, until they leave the GPU or your reservation ends.\n")
	}
	return userSubject(idle, using, theirs), b.String()
}

// userSubject names a user's mail (see userMail).
func userSubject(idle, using, theirs []Event) string {
	if len(using)+len(theirs) == 0 {
		switch {
		case len(idle) == 1 && len(idle[0].Working) > 0:
			return fmt.Sprintf("[gpumon] your processes on GPU %s on %s have been idle for %s", name(idle[0].GPU), name(idle[0].Host), hours(idle[0].Duration()))
		case len(idle) == 1:
			return fmt.Sprintf("[gpumon] your GPU %s on %s has been idle for %s", name(idle[0].GPU), name(idle[0].Host), hours(idle[0].Duration()))
		}
		return fmt.Sprintf("[gpumon] %d of your GPUs have been idle for hours", len(idle))
	}
	if len(idle)+len(using)+len(theirs) > 1 {
		return fmt.Sprintf("[gpumon] %d notices about your GPUs and reservations", len(idle)+len(using)+len(theirs))
	}
	if len(using) == 1 {
		e := using[0]
		return fmt.Sprintf("[gpumon] GPU %s on %s, which you use, is reserved for %s", name(e.GPU), name(e.Host), name(e.Reservation.owner()))
	}
	e := theirs[0]
	if e.State == Firing {
		return fmt.Sprintf("[gpumon] %s uses GPU %s on %s, reserved for you", users(e.Users), name(e.GPU), name(e.Host))
	}
	return fmt.Sprintf("[gpumon] %s no longer uses GPU %s on %s, reserved for you", users(e.Users), name(e.GPU), name(e.Host))
}

// Mail is a whole message for `sendmail -t -i`: the recipients are in To.
// Header values never hold a line break (no value from a host can add a
// header or a recipient); a subject outside ASCII is encoded (RFC 2047).
// Auto-Submitted keeps vacation replies from answering it (RFC 3834).
func Mail(to []string, fromAddr, subject, body, pageURL, sender string, now time.Time) []byte {
	var b bytes.Buffer
	h := func(k, v string) { fmt.Fprintf(&b, "%s: %s\r\n", k, headerValue(v)) }
	if fromAddr != "" {
		h("From", fromAddr)
	}
	h("To", strings.Join(to, ", "))
	h("Subject", mime.QEncoding.Encode("utf-8", headerValue(subject)))
	h("Date", now.Format(time.RFC1123Z))
	var id [12]byte
	rand.Read(id[:])
	h("Message-ID", "<"+hex.EncodeToString(id[:])+".gpumon@"+headerValue(hostPart(sender))+">")
	h("Auto-Submitted", "auto-generated")
	h("MIME-Version", "1.0")
	h("Content-Type", "text/plain; charset=utf-8")
	// quoted-printable: a line with commands or many users can pass the
	// 998 bytes SMTP allows, and an MTA would bounce it
	h("Content-Transfer-Encoding", "quoted-printable")
	b.WriteString("\r\n")
	qp := quotedprintable.NewWriter(&b)
	text := strings.TrimRight(body, "\n") + "\n\n"
	if pageURL != "" {
		text += "The status page: " + headerValue(pageURL) + "\n"
	}
	text += "-- \nSent by gpumon's render" + headerValue(senderText(sender)) + ". The admins set who is told in config.ini's [notify].\n"
	qp.Write([]byte(text)) // into a bytes.Buffer: no error
	qp.Close()
	return b.Bytes()
}

func senderText(s string) string {
	if s == "" {
		return ""
	}
	return " on " + s
}

func hostPart(s string) string {
	if s == "" || !dotAtom(s) {
		return "localhost"
	}
	return s
}

// headerValue is s on one line, printable.
func headerValue(s string) string {
	return hosttext.Printable(strings.NewReplacer("\r", " ", "\n", " ").Replace(s))
}

// ParseMailAddresses reads mail_to: addresses separated by commas, each a
// bare address or "Name <address>"; the bare addresses are returned.
func ParseMailAddresses(list []string) ([]string, error) {
	var out []string
	for _, s := range list {
		a, err := mail.ParseAddress(s)
		if err != nil || strings.ContainsAny(a.Address, "\r\n") {
			return nil, fmt.Errorf("%q is not a mail address", s)
		}
		out = append(out, a.Address)
	}
	return out, nil
}
