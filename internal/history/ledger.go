package history

import "time"

// Figures are what the accounting adds up for one holder (a user on a
// GPU, in a job and a Slurm account), over a span: the figures people
// bill and act on. Each is in seconds (GPU-seconds) or joules; a figure
// that is not always known comes with the seconds it covers, so a report
// can say how much of the span it stands for.
type Figures struct {
	// GPUSeconds held: a GPU held by n users is 1/n to each.
	GPUSeconds float64
	// EffSeconds are the utilization-weighted GPU-seconds: a GPU at 30 %
	// for 10 h is 3 effective hours of 10. The holder's own SM % where
	// it is known (pmon), else the GPU's utilization times their share;
	// never more than their share. EffKnownSeconds are the GPU-seconds
	// whose utilization was known (not MIG, not an AMD partition).
	EffSeconds      float64
	EffKnownSeconds float64
	// MemSeconds are the share of the GPU's memory the holder used, times
	// their GPU-seconds, over MemKnownSeconds.
	MemSeconds      float64
	MemKnownSeconds float64
	// EnergyJ is the holder's share of the GPU's power draw, integrated
	// over the span: by their SM % when every holder's is known, else 1/n.
	// EnergyKnownSeconds are the GPU-seconds whose power was known (and
	// sane: not negative, not above 10 times the cap).
	EnergyJ            float64
	EnergyKnownSeconds float64
	// IdleHeldSeconds are the idle-held GPU-seconds (spells that lasted
	// idle_after), never more than GPUSeconds of the same hours.
	IdleHeldSeconds float64
	// UnreservedSeconds are the GPU-seconds held on a GPU reserved for
	// someone else.
	UnreservedSeconds float64
}

// Add adds o to f.
func (f *Figures) Add(o Figures) {
	f.GPUSeconds += o.GPUSeconds
	f.EffSeconds += o.EffSeconds
	f.EffKnownSeconds += o.EffKnownSeconds
	f.MemSeconds += o.MemSeconds
	f.MemKnownSeconds += o.MemKnownSeconds
	f.EnergyJ += o.EnergyJ
	f.EnergyKnownSeconds += o.EnergyKnownSeconds
	f.IdleHeldSeconds += o.IdleHeldSeconds
	f.UnreservedSeconds += o.UnreservedSeconds
}

// LedgerRow is one holder's figures over a span: a user, in a Slurm
// account ("" outside Slurm) and a job ("" outside Slurm; only in
// Ledger.Jobs), on GPUs of a model (the vendor tool's name). Hosts are
// not part of it: Ledger.Hosts has them, per host.
type LedgerRow struct {
	User    string // IdleJobUser for idlemon's job
	Account string
	Job     string
	Model   string
	Figures
}

// HostRow is one host's GPUs of a model over a span: all of them, held
// or not, while the host answered.
type HostRow struct {
	Host  string
	Model string
	// GPUSeconds: every GPU of the host while it answered; Held the
	// part held by someone (idlemon's job included).
	GPUSeconds, HeldSeconds float64
	// EffSeconds: utilization-weighted, over EffKnownSeconds.
	EffSeconds, EffKnownSeconds float64
	// EnergyJ: every GPU's, over EnergyKnownSeconds; UnheldEnergyJ the
	// part drawn by GPUs nobody held: the lab's own baseline.
	EnergyJ, EnergyKnownSeconds, UnheldEnergyJ float64
}

// Ledger is the accounting over [From, To) (whole hours, as Usage).
type Ledger struct {
	From, To time.Time
	// Users: per user, account and model (Job ""), sorted.
	Users []LedgerRow
	// Jobs: per Slurm job, with its user, account and model, sorted.
	Jobs []LedgerRow
	// Hosts: per host and model, sorted.
	Hosts []HostRow
}
