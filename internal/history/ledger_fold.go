package history

import "strings"

// ledgerRates are one snapshot's accounting as rates: per second of the
// span its readings stand for, each holder's share of GPUs, effective
// GPUs, memory, watts. The next snapshot multiplies them by the span.
// They are never saved (foldState.ledger).
type ledgerRates struct {
	Users map[string]*Figures   // by ledgerKey(user, account, "", model)
	Jobs  map[string]*Figures   // by ledgerKey(user, account, job, model)
	Hosts map[string]*hostRates // by ledgerKey(host, "", "", model)
}

// hostRates are a host's GPUs of one model at a snapshot: HostRow's
// figures per second.
type hostRates struct {
	GPUs      float64
	Held      float64
	Eff       float64
	EffKnown  float64
	Watts     float64
	WattsKnow float64
	Unheld    float64 // watts of GPUs nobody holds
}

// ledgerKey joins a row's names; none of them holds a NUL (the CSV's
// reader refuses control characters in names).
func ledgerKey(a, b, c, d string) string { return a + "\x00" + b + "\x00" + c + "\x00" + d }

// splitKey is ledgerKey's four names.
func splitKey(k string) (a, b, c, d string) {
	p := strings.SplitN(k, "\x00", 4)
	for len(p) < 4 {
		p = append(p, "")
	}
	return p[0], p[1], p[2], p[3]
}

// ledgerOf is s's accounting rates. A GPU only idlemon's job uses counts
// to IdleJobUser; a down host's GPUs count to nobody (not known).
func ledgerOf(s *Snapshot) ledgerRates {
	l := ledgerRates{Users: map[string]*Figures{}, Jobs: map[string]*Figures{}, Hosts: map[string]*hostRates{}}
	for _, h := range s.Hosts {
		if !h.Up {
			continue
		}
		for i := range h.GPUs {
			g := &h.GPUs[i]
			hr := l.Hosts[ledgerKey(h.Name, "", "", g.Name)]
			if hr == nil {
				hr = &hostRates{}
				l.Hosts[ledgerKey(h.Name, "", "", g.Name)] = hr
			}
			addHostRates(hr, g)
			holders := g.Holders
			if len(holders) == 0 && g.IdleJob {
				holders = []Holder{{User: IdleJobUser}}
			}
			for j := range holders {
				f := holderRates(g, holders, j)
				hd := &holders[j]
				addRates(l.Users, ledgerKey(hd.User, hd.Account, "", g.Name), f)
				if hd.Job != "" {
					addRates(l.Jobs, ledgerKey(hd.User, hd.Account, hd.Job, g.Name), f)
				}
			}
		}
	}
	return l
}

func addRates(m map[string]*Figures, key string, f Figures) {
	if m[key] == nil {
		m[key] = &Figures{}
	}
	m[key].Add(f)
}

func addHostRates(hr *hostRates, g *GPU) {
	hr.GPUs++
	held := len(g.Holders) > 0 || g.IdleJob
	if held {
		hr.Held++
	}
	if g.HasUtil {
		hr.Eff += clampPct(g.UtilPct) / 100
		hr.EffKnown++
	}
	if g.HasPower {
		hr.Watts += g.PowerW
		hr.WattsKnow++
		if !held {
			hr.Unheld += g.PowerW
		}
	}
}

// holderRates is holders[i]'s share of g, per second. Effective use is
// the holder's own SM % where known, else the GPU's utilization times
// their share, and never more than their share: effective hours never
// exceed GPU-hours. The GPU's power is split by the holders' SM % when
// every one's is known and some is used, else evenly.
func holderRates(g *GPU, holders []Holder, i int) Figures {
	hd := &holders[i]
	share := 1 / float64(len(holders))
	f := Figures{GPUSeconds: share}
	switch {
	case hd.HasSM:
		f.EffSeconds, f.EffKnownSeconds = min(share, clampPct(hd.SMPct)/100), share
	case g.HasUtil:
		f.EffSeconds, f.EffKnownSeconds = clampPct(g.UtilPct)/100*share, share
	}
	if g.MemTotalMiB > 0 && hd.User != IdleJobUser {
		f.MemSeconds, f.MemKnownSeconds = min(1, max(0, hd.MemMiB)/g.MemTotalMiB)*share, share
	}
	if g.HasPower {
		f.EnergyJ, f.EnergyKnownSeconds = g.PowerW*powerShare(holders, i), share
	}
	if g.ReservedFor != "" && hd.User != g.ReservedFor && hd.User != IdleJobUser {
		f.UnreservedSeconds = share
	}
	return f
}

// powerShare is holders[i]'s part of the GPU's power.
func powerShare(holders []Holder, i int) float64 {
	var sum float64
	for _, h := range holders {
		if !h.HasSM {
			return 1 / float64(len(holders))
		}
		sum += clampPct(h.SMPct)
	}
	if sum <= 0 {
		return 1 / float64(len(holders))
	}
	return clampPct(holders[i].SMPct) / sum
}

// clampPct keeps a percentage from a host within 0 to 100 (NaN is 0).
func clampPct(v float64) float64 {
	if !(v > 0) {
		return 0
	}
	return min(v, 100)
}

// ledgerEffects are the figures a span adds: the rates times its seconds.
type ledgerEffects struct {
	Users, Jobs map[string]Figures
	Hosts       map[string]HostRow
}

func (l *ledgerRates) times(span float64) ledgerEffects {
	e := ledgerEffects{Users: make(map[string]Figures, len(l.Users)), Jobs: make(map[string]Figures, len(l.Jobs)),
		Hosts: make(map[string]HostRow, len(l.Hosts))}
	if span <= 0 {
		return e
	}
	for k, f := range l.Users {
		e.Users[k] = f.scaled(span)
	}
	for k, f := range l.Jobs {
		e.Jobs[k] = f.scaled(span)
	}
	for k, r := range l.Hosts {
		e.Hosts[k] = HostRow{GPUSeconds: r.GPUs * span, HeldSeconds: r.Held * span, EffSeconds: r.Eff * span,
			EffKnownSeconds: r.EffKnown * span, EnergyJ: r.Watts * span, EnergyKnownSeconds: r.WattsKnow * span,
			UnheldEnergyJ: r.Unheld * span}
	}
	return e
}

func (f Figures) scaled(k float64) Figures {
	return Figures{GPUSeconds: f.GPUSeconds * k, EffSeconds: f.EffSeconds * k, EffKnownSeconds: f.EffKnownSeconds * k,
		MemSeconds: f.MemSeconds * k, MemKnownSeconds: f.MemKnownSeconds * k, EnergyJ: f.EnergyJ * k,
		EnergyKnownSeconds: f.EnergyKnownSeconds * k, IdleHeldSeconds: f.IdleHeldSeconds * k,
		UnreservedSeconds: f.UnreservedSeconds * k}
}
