package render

import (
	"bufio"
	"strconv"
	"strings"

	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/hosttext"
)

// How much of each Slurm and container field the page and the terminal
// show, in bytes; status.json has them whole. A job's or a container's
// name is whatever its owner typed: it is made printable (a newline, a
// bidi override or a zero-width rune is "?" on the page; oneLine makes it
// a space in the terminal) and cut, so that it can neither reorder the
// text around it nor fill a detail.
const (
	jobIDMax     = 32 // "1233_5"; an array's pending range "1233_[5-99%4]" may be longer
	jobNameMax   = 40
	partitionMax = 24
	containerMax = 40 // a name; an id is 12 hex digits
	podMax       = 8  // a pod's uid, cut to its first group as docker ps cuts an id
)

// pageText is s from a user made printable and cut to n bytes with "…".
// Only s's first bytes are looked at: a 1 MiB name costs what a short
// one does.
func pageText(s string, n int) string {
	if len(s) > 4*n {
		s = hosttext.Clip(s, 4*n)
	}
	return hosttext.Clip(hosttext.Printable(s), n)
}

// attributed reports whether any of p's six fields is known.
func attributed(p *cluster.Proc) bool {
	return p.SlurmJob != "" || p.SlurmJobName != "" || p.SlurmPartition != "" ||
		p.Container != "" || p.ContainerName != "" || p.Pod != ""
}

// holderName is who a cell names for p (cluster.Proc.Holder): a user as
// userName shows one, or, for root in a container, the container's name
// made printable like every field of the container.
func holderName(p *cluster.Proc) string {
	h := p.Holder()
	if h != p.User {
		return pageText(h, containerMax)
	}
	return userName(h)
}

// jobText is what the detail's "job / container" column says of p: the
// Slurm job as "1233_5 llama-7b (gpu)" (its id, name and partition, those
// known), the container by name, else its short id, and "pod " and the
// first 8 hex digits of the pod's uid, joined by " · "; "" when nothing is
// known. Each part is printable and cut (pageText).
func jobText(p *cluster.Proc) string {
	var b strings.Builder
	sep := func() {
		if b.Len() > 0 {
			b.WriteString(" · ")
		}
	}
	job := pageText(p.SlurmJob, jobIDMax)
	if name := pageText(p.SlurmJobName, jobNameMax); name != "" {
		job = strings.TrimPrefix(job+" "+name, " ")
	}
	if part := pageText(p.SlurmPartition, partitionMax); part != "" {
		job = strings.TrimPrefix(job+" ("+part+")", " ")
	}
	b.WriteString(job)
	if c := pageText(p.ContainerLabel(), containerMax); c != "" {
		sep()
		b.WriteString(c)
	}
	if p.Pod != "" {
		sep()
		b.WriteString("pod ")
		b.WriteString(pageText(p.Pod, podMax+len("…")))
	}
	return b.String()
}

// userJobsMax is how many jobs and containers the users table names for a
// user; the rest are "+N more" (status.json lists them all).
const userJobsMax = 4

// userJobsText is the users table's "jobs / containers" cell: the user's
// Slurm job ids, then their containers (by name, else id), the first
// userJobsMax of them, "998, 1233_5, vllm-server +3 more".
func userJobsText(u *cluster.User) string {
	n := len(u.Jobs) + len(u.Containers)
	var parts []string
	for i := 0; i < n && i < userJobsMax; i++ {
		if i < len(u.Jobs) {
			parts = append(parts, pageText(u.Jobs[i], jobIDMax))
		} else {
			parts = append(parts, pageText(u.Containers[i-len(u.Jobs)], containerMax))
		}
	}
	s := strings.Join(parts, ", ")
	if n > userJobsMax {
		s += " +" + strconv.Itoa(n-userJobsMax) + " more"
	}
	return s
}

// writeJobCell writes the detail's "job / container" cell of p.
func writeJobCell(w *bufio.Writer, p *cluster.Proc) {
	w.WriteString("<td>")
	esc(w, jobText(p))
}
