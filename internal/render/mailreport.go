package render

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gpumon/gpumon/internal/accounting"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/notify"
)

// reportMail is one mail of -report: a user's own report or a team's to
// its lead.
type reportMail struct {
	// Recipient is "user NAME" or "team NAME": what a span's mails are
	// told apart by, so a lead who is also a user gets both.
	Recipient string
	To        string // the address; "" when Skip says why there is none
	Skip      string
	Subject   string
	Body      string
}

// maxTopJobs is the most jobs a user's report lists.
const maxTopJobs = 5

// reportMails are the span's mails: one to each user with GPU-hours in l
// (idlemon's job is nobody's), then one to each team lead whose team has
// some. Figures are accounting.Aggregate's.
func reportMails(l *history.Ledger, c *accounting.Config, t notify.Targets, s mailSpan) []reportMail {
	users := accounting.Aggregate(l, accounting.ByUser, c)
	jobs := accounting.Aggregate(l, accounting.ByJob, c)
	var out []reportMail
	for _, u := range users {
		if u.Key == history.IdleJobUser || u.GPUHours <= 0 {
			continue
		}
		m := reportMail{Recipient: "user " + u.Key}
		m.To, m.Skip = userAddress(u.Key, t)
		m.Subject, m.Body = userReport(u, jobsOf(jobs, u.Key), c, s)
		out = append(out, m)
	}
	teams := accounting.Aggregate(l, accounting.ByTeam, c)
	for _, team := range c.Teams {
		i := slices.IndexFunc(teams, func(line accounting.Line) bool { return line.Key == team.Name })
		if team.Lead == "" || i < 0 || teams[i].GPUHours <= 0 {
			continue
		}
		var members []accounting.Line
		for _, u := range users {
			if slices.Contains(team.Members, u.Key) {
				members = append(members, u)
			}
		}
		m := reportMail{Recipient: "team " + team.Name}
		m.To, m.Skip = leadAddress(team.Lead, t)
		m.Subject, m.Body = teamReport(l, teams[i], members, c, s)
		out = append(out, m)
	}
	return out
}

// jobsOf are the first maxTopJobs of user's jobs, in Aggregate's order (by
// cost when priced, else GPU-hours).
func jobsOf(jobs []accounting.Line, user string) []accounting.Line {
	var out []accounting.Line
	for _, j := range jobs {
		if j.User == user && len(out) < maxTopJobs {
			out = append(out, j)
		}
	}
	return out
}

// userAddress is user's address by [notify] mail_users (notify's rule for
// the holders of idle GPUs), or why there is none.
func userAddress(user string, t notify.Targets) (addr, why string) {
	if t.UserDomain == "" {
		return "", "[notify] mail_users is not set"
	}
	if why := notMailableUser(user); why != "" {
		return "", why
	}
	addr = user + "@" + t.UserDomain
	if !t.Configured(notify.MailTarget([]string{addr})) {
		return "", "the name is not a mail local part"
	}
	return addr, ""
}

// notMailableUser says in words why notify does not mail user (its
// Targets.Configured decides): a root or uid is nobody in particular.
func notMailableUser(user string) string {
	switch {
	case user == "":
		return "the user is unknown"
	case user == "root":
		return "root is not a person"
	case strings.Trim(user, "0123456789") == "":
		return "ps printed a uid, not a name"
	}
	return ""
}

// leadAddress is a team lead's address: the lead as written when it is
// one, else a user's.
func leadAddress(lead string, t notify.Targets) (addr, why string) {
	if !strings.Contains(lead, "@") {
		return userAddress(lead, t)
	}
	addrs, err := notify.ParseMailAddresses([]string{lead})
	if err != nil {
		return "", err.Error()
	}
	return addrs[0], ""
}

// userReport is a user's mail: their figures, their top jobs and, under
// low_efficiency_pct, a plain word about it.
func userReport(u accounting.Line, jobs []accounting.Line, c *accounting.Config, s mailSpan) (subject, body string) {
	var b strings.Builder
	fmt.Fprintf(&b, "Hello %s,\n\nyour use of the GPUs %s:\n\n", clean(u.Key, 64), spanWords(s))
	figureLines(&b, u, c, "your processes used GPUs reserved for someone else")
	if lowEfficiency(c)(u) {
		fmt.Fprintf(&b, "\nYour GPUs did work %s of the time you held them; others wait for GPUs while\n"+
			"yours stay idle. Please release GPUs you are not using (end the processes that\n"+
			"hold them), and ask the admins if your jobs could keep them busier.\n", percent(u.Efficiency))
	}
	if len(jobs) > 0 {
		by := "GPU-hours"
		if c.Priced() {
			by = "cost"
		}
		fmt.Fprintf(&b, "\nYour top jobs by %s:\n\n", by)
		for _, j := range jobs {
			fmt.Fprintf(&b, "  job %s%s: %.1f GPU-hours, efficiency %s%s\n", clean(j.Key, 40), accountWords(j.Account),
				j.GPUHours, percent(j.Efficiency), costWords(j, c))
		}
	}
	return "[gpumon] Your GPU use, " + s.Label, b.String()
}

// teamReport is a team lead's mail: the team's figures and its members'
// lines, as -usage -by user prints them.
func teamReport(l *history.Ledger, team accounting.Line, members []accounting.Line, c *accounting.Config, s mailSpan) (subject, body string) {
	name := clean(team.Key, 64)
	var b strings.Builder
	fmt.Fprintf(&b, "Hello,\n\nthe use of the GPUs by team %s %s:\n\n", name, spanWords(s))
	figureLines(&b, team, c, "its members used GPUs reserved for someone else")
	b.WriteString("\nPer member:\n\n")
	var table bytes.Buffer
	ledgerText(&table, l, members, accounting.ByUser, c)  // into a buffer: no error
	_, lines, _ := bytes.Cut(table.Bytes(), []byte("\n")) // its title says the span again, in UTC
	b.Write(lines)
	return "[gpumon] Team " + name + "'s GPU use, " + s.Label, b.String()
}

// spanWords is the span in a sentence, in the machine's local time.
func spanWords(s mailSpan) string {
	const layout = "Mon 2006-01-02 15:04"
	return fmt.Sprintf("from %s to %s (%s)", s.From.Format(layout), s.To.Format(layout), s.To.Format("MST"))
}

// figureLines are a report's figures, one a line: energy with the share
// of the GPU-hours it covers when not all, cost and CO2 when set, hours
// on others' reservations when any.
func figureLines(b *strings.Builder, l accounting.Line, c *accounting.Config, unreserved string) {
	fmt.Fprintf(b, "  GPU-hours:            %.1f\n", l.GPUHours)
	fmt.Fprintf(b, "  effective GPU-hours:  %.1f (efficiency %s)\n", l.EffHours, percent(l.Efficiency))
	fmt.Fprintf(b, "  idle-held GPU-hours:  %.1f\n", l.IdleHeldHours)
	energy := fmt.Sprintf("%.2f kWh", l.KWh)
	if l.KWhCoverage < 1 {
		energy += fmt.Sprintf(" (power known for %d %% of the GPU-hours)", int(l.KWhCoverage*100))
	}
	fmt.Fprintf(b, "  energy:               %s\n", energy)
	if l.HasCost {
		fmt.Fprintf(b, "  cost:                 %.2f %s", l.Cost, clean(c.Currency, 8))
		if l.UnpricedGPUHours > 0 {
			fmt.Fprintf(b, " (leaves out %.1f GPU-hours on models without a price)", l.UnpricedGPUHours)
		}
		b.WriteString("\n")
	}
	if l.HasCO2 {
		fmt.Fprintf(b, "  CO2:                  %.2f kg\n", l.CO2Kg)
	}
	if l.UnreservedHours > 0 {
		fmt.Fprintf(b, "\nFor %.1f GPU-hours %s (unreserved use).\n", l.UnreservedHours, unreserved)
	}
}

// percent is a share in words, "unknown" when it is (MIG, an AMD
// partition).
func percent(share float64) string {
	if math.IsNaN(share) {
		return "unknown"
	}
	return fmt.Sprintf("%.0f %%", share*100)
}

func accountWords(account string) string {
	if account == "" {
		return ""
	}
	return " (account " + clean(account, 40) + ")"
}

func costWords(l accounting.Line, c *accounting.Config) string {
	if !l.HasCost {
		return ""
	}
	return fmt.Sprintf(", %.2f %s", l.Cost, clean(c.Currency, 8))
}

// reportTimeout is the most one mail's sendmail may take: notify's, whose
// Sendmail says so when it runs out.
const reportTimeout = notify.Budget
