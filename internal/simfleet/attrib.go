package simfleet

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpumon/gpumon/internal/attrib"
	"github.com/gpumon/gpumon/internal/probe"
)

// A SlurmJob is a job squeue knows on a simulated Slurm node.
type SlurmJob struct {
	// JobID is the numeric id, the one a process's cgroup names (%A).
	JobID int
	// Display is how squeue prints it (%i): "7400_3" for task 3 of array
	// job 7400; "" for JobID itself.
	Display   string
	Partition string
	Account   string // %a: the account the job bills
	Name      string
}

// A Container is one that `docker ps` (or podman's) lists on a host.
type Container struct {
	ID    string // 64 hex digits
	Names string // as {{.Names}} prints them: "name" or "name,alias"
}

// defaultCgroup is the cgroup of a process started from a login session.
const defaultCgroup = "0::/user.slice/user-1000.slice/session-1.scope\n"

// slurmCgroup is /proc/PID/cgroup of a process of Slurm job id, step 0,
// on a cgroup v2 host.
func slurmCgroup(id int) string {
	return fmt.Sprintf("0::/system.slice/slurmstepd.scope/job_%d/step_0/user/task_0\n", id)
}

// dockerCgroup is /proc/PID/cgroup of a process in Docker container id
// (64 hex digits), systemd cgroup driver, cgroup v2.
func dockerCgroup(id string) string {
	return "0::/system.slice/docker-" + id + ".scope\n"
}

// podCgroup is /proc/PID/cgroup of a process in container id of the
// Kubernetes pod with uid pod (with dashes), containerd, systemd driver,
// a burstable pod.
func podCgroup(pod, id string) string {
	return "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" +
		strings.ReplaceAll(pod, "-", "_") + ".slice/cri-containerd-" + id + ".scope\n"
}

// recordMark stands for the run's record prefix (probe.RecordPrefix) in
// cached answers: it depends on the nonce, which changes with every run.
const recordMark = "\x00"

// attribAnswer is what the script prints after ps for one process list:
// the cgroups section, squeue's, and which engines a cgroup names.
type attribAnswer struct {
	cgroups   []byte
	squeue    rendered
	hasSqueue bool
	names     map[string]bool // engines whose containers a cgroup names
}

// renderAttrib answers as the script does for the pids of apps, in the
// order it lists them, each once: their cgroups; one squeue for the jobs
// those name, in the script's format (job %A %i %P account=%a %j), where
// the host is a Slurm node; and whether a cgroup names
// a container of docker's or podman's (then their ps runs, if asked for).
func (h *host) renderAttrib(apps []byte) attribAnswer {
	a := attribAnswer{names: map[string]bool{}}
	var cg bytes.Buffer
	seen := map[int]bool{}
	var asked []int
	askedSet := map[int]bool{}
	for _, line := range bytes.Split(apps, []byte("\n")) {
		f, _, _ := bytes.Cut(line, []byte(","))
		if len(f) == 0 || len(bytes.Trim(f, "0123456789")) != 0 {
			continue
		}
		pid, err := strconv.Atoi(string(f))
		if err != nil || seen[pid] {
			continue
		}
		seen[pid] = true
		fmt.Fprintf(&cg, "%spid %d\n", recordMark, pid)
		p, ok := h.procByPID[pid]
		if !ok {
			continue // gone: the script prints nothing after the record
		}
		text := p.Cgroup
		if text == "" {
			text = defaultCgroup
		}
		cg.WriteString(text)
		// the script picks job ids with case patterns, ParseCgroup the
		// same for the shapes the fleet uses
		if j, err := strconv.Atoi(attrib.ParseCgroup(text).SlurmJob); err == nil && !askedSet[j] && len(asked) < 1024 {
			askedSet[j] = true
			asked = append(asked, j)
		}
		for _, l := range strings.Split(text, "\n") {
			_, path, _ := strings.Cut(l, "::")
			switch {
			case strings.HasPrefix(path, "/docker/"), strings.HasPrefix(path, "/system.slice/docker-"), strings.HasPrefix(path, "/kubepods"):
				a.names[probe.ContainersDocker] = true
			case strings.Contains(path, "libpod-"):
				a.names[probe.ContainersPodman] = true
			}
		}
	}
	a.cgroups = cg.Bytes()
	if len(asked) == 0 || h.spec.Slurm == nil {
		return a
	}
	a.hasSqueue = true
	var b bytes.Buffer
	for _, j := range h.spec.Slurm {
		if !askedSet[j.JobID] {
			continue
		}
		display := j.Display
		if display == "" {
			display = strconv.Itoa(j.JobID)
		}
		fmt.Fprintf(&b, "%sjob %d %s %s account=%s %s\n", recordMark, j.JobID, display, j.Partition, j.Account, j.Name)
	}
	if b.Len() == 0 {
		a.squeue = rendered{[]byte("slurm_load_jobs error: Invalid job id specified\n"), 1}
	} else {
		a.squeue = rendered{b.Bytes(), 0}
	}
	return a
}

// renderContainers is the host's docker (or podman) ps.
func (h *host) renderContainers() []byte {
	var b bytes.Buffer
	for _, c := range h.spec.Containers {
		fmt.Fprintf(&b, "%sctr %s %s\n", recordMark, c.ID, c.Names)
	}
	return b.Bytes()
}

// writeAttrib writes the sections after ps, as the script would for req.
func (h *host) writeAttrib(w probe.Writer, req probe.Request, a attribAnswer) {
	prefix := []byte(probe.RecordPrefix(req.Nonce))
	mark := []byte(recordMark)
	_ = w.Section(probe.SectionCgroups, bytes.ReplaceAll(a.cgroups, mark, prefix), 0)
	if a.hasSqueue {
		_ = w.Section(probe.SectionSqueue, bytes.ReplaceAll(a.squeue.body, mark, prefix), a.squeue.code)
	}
	if e := req.Containers; e != "" && e == h.spec.ContainerEngine && a.names[e] {
		_ = w.Section(e, bytes.ReplaceAll(h.containers, mark, prefix), 0)
	}
}
