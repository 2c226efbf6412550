package fetch

import (
	"bytes"
	"strings"

	"github.com/gpumon/gpumon/internal/attrib"
	"github.com/gpumon/gpumon/internal/hosttext"
	"github.com/gpumon/gpumon/internal/probe"
)

// readAttribution reads who each GPU process runs for: the Slurm job,
// container and pod its cgroups name, and what squeue and docker or
// podman ps said of them. None of it can fail the host: what cannot be
// read is unknown (empty cells), with a warning where a command failed.
func readAttribution(po probe.Output, nonce string, w *warnings) map[int]attrib.Attribution {
	sec, ok := po.Sections[probe.SectionCgroups]
	if !ok {
		return nil // no GPU process, so the script read none
	}
	prefix := probe.RecordPrefix(nonce)
	if sec.ExitCode != 0 {
		w.add("reading the processes' cgroups failed (exit %d)%s; Slurm jobs and containers unknown", sec.ExitCode, complaint(sec.Body, prefix))
		return nil
	}
	cgroups := attrib.ParseCgroups(sec.Body, prefix)
	asked := map[string]bool{}
	for _, c := range cgroups {
		if c.SlurmJob != "" {
			asked[c.SlurmJob] = true
		}
	}
	jobs := readSqueue(po, prefix, asked, w)
	names := readContainers(po, prefix, w)
	out := make(map[int]attrib.Attribution, len(cgroups))
	for pid, c := range cgroups {
		if c != (attrib.Cgroup{}) {
			out[pid] = attrib.Attribute(c, jobs, names)
		}
	}
	return out
}

// readSqueue reads the jobs' names and partitions, where the host has
// squeue and a cgroup named a job.
func readSqueue(po probe.Output, prefix string, asked map[string]bool, w *warnings) map[string]attrib.Job {
	sec, ok := po.Sections[probe.SectionSqueue]
	if !ok {
		return nil
	}
	jobs, skipped := attrib.ParseSqueue(sec.Body, prefix, asked)
	switch sec.ExitCode {
	case 0:
	case 1:
		// squeue says "Invalid job id specified" and exits 1 for jobs
		// that ended between nvidia-smi and squeue: nothing went wrong
		if !bytes.Contains(sec.Body, []byte("Invalid job id")) {
			w.add("squeue failed (exit 1)%s; Slurm job names unknown", complaint(sec.Body, prefix))
		}
	case 124, 137:
		w.add("squeue did not answer in time (exit %d); Slurm job names unknown", sec.ExitCode)
	default:
		w.add("squeue failed (exit %d)%s; Slurm job names unknown", sec.ExitCode, complaint(sec.Body, prefix))
	}
	for _, s := range skipped {
		w.add("%s", s)
	}
	return jobs
}

// readContainers reads the containers' names, where [common] containers
// asked docker or podman, a cgroup named a container and the host has the
// command.
func readContainers(po probe.Output, prefix string, w *warnings) map[string]string {
	for _, engine := range []string{probe.SectionDocker, probe.SectionPodman} {
		sec, ok := po.Sections[engine]
		if !ok {
			continue
		}
		names, skipped := attrib.ParseContainers(sec.Body, prefix)
		switch sec.ExitCode {
		case 0:
		case 124, 137:
			w.add("%s ps did not answer in time (exit %d); container names unknown", engine, sec.ExitCode)
		default:
			// typically: the account may not use the engine's socket
			w.add("%s ps failed (exit %d)%s; container names unknown", engine, sec.ExitCode, complaint(sec.Body, prefix))
		}
		for _, s := range skipped {
			w.add("%s ps: %s", engine, s)
		}
		return names
	}
	return nil
}

// complaint is ": " and the first line of body that is not a record, the
// command's own words, or "" when there is none.
func complaint(body []byte, prefix string) string {
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, prefix) {
			continue
		}
		if l = hosttext.FirstLine(l); l != "" {
			return ": " + l
		}
	}
	return ""
}
