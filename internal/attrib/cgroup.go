// Package attrib tells who a GPU process runs for: the Slurm job, the
// container and the Kubernetes pod, read from the process's
// /proc/PID/cgroup, and the job's and container's names, read from one
// squeue and one docker (or podman) ps per host.
//
// It parses only: the probe script (internal/probe) collects the text on
// the host, fetch fills load_data.csv's columns from what it returns.
//
// A cgroup path says who a process runs for only where the path is one that
// the system's own daemons make and nobody else can: slurmstepd, dockerd,
// podman, the kubelet, all of them writing at the root of the hierarchy,
// where a user cannot make a folder. A user owns a delegated subtree
// (/user.slice/user-UID.slice/user@UID.service/...) and names its folders
// at will, so every shape is anchored at the path's start: a user's
// folder named job_42 or docker-<id>.scope deep in their own subtree says
// nothing. The one shape accepted inside that subtree is rootless
// Podman's, which is the user's own by nature (the process's user still
// shows beside it). Anything else, and anything that does not parse, is
// unknown: never guessed at.
package attrib

import "strings"

// Cgroup is what a process's cgroups say it runs in. An empty field is
// unknown (or not in one).
type Cgroup struct {
	// SlurmJob is the job id as the cgroup path names it: the numeric id,
	// unique per array task ("1240", which squeue prints as "1233_5").
	SlurmJob string
	// ContainerID is the container's full id, 64 lowercase hex digits.
	ContainerID string
	// Pod is the Kubernetes pod's uid with dashes
	// ("1b2c3d4e-0000-4a5b-8c9d-0123456789ab").
	Pod string
}

// Container is the container id as docker ps prints it: its first 12 hex
// digits ("" when there is none).
func (c Cgroup) Container() string {
	if len(c.ContainerID) < shortID {
		return ""
	}
	return c.ContainerID[:shortID]
}

const (
	shortID = 12 // hex digits of a container id shown
	fullID  = 64 // hex digits of a container id
	// maxCgroupText is the most of one process's /proc/PID/cgroup that is
	// read: the probe stops at 4,096 bytes (a real one is 1 KiB at most,
	// a dozen v1 hierarchies with Docker's paths), and a longer text is
	// unknown rather than read in part.
	maxCgroupText = 4096
)

// ParseCgroup reads the text of one process's /proc/PID/cgroup: lines of
// "hierarchy-ID:controllers:path", cgroup v1 hierarchies and the v2 "0::"
// line alike. Every line is looked at; where two say different things
// (two jobs, two containers, two pods), the whole is unknown.
//
// A line that does not parse, or a hierarchy id listed twice, makes the
// whole unknown too: the kernel prints each hierarchy once, and refuses a
// newline in a cgroup's name (mkdir fails with EINVAL in v1 and v2, and so
// does a v1 rename; checked on Linux 6.18 as root, see
// TestRealSSHDAttribution), so such a text was not made by the kernel
// alone.
func ParseCgroup(text string) Cgroup {
	if text == "" || len(text) > maxCgroupText {
		return Cgroup{}
	}
	var out Cgroup
	seen := make(map[string]bool, 16) // hierarchy ids
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		id, rest, ok1 := strings.Cut(line, ":")
		_, path, ok2 := strings.Cut(rest, ":")
		if !ok1 || !ok2 || !digits(id) || !strings.HasPrefix(path, "/") || seen[id] {
			return Cgroup{}
		}
		seen[id] = true
		c := classify(path)
		if !merge(&out.SlurmJob, c.SlurmJob) || !merge(&out.ContainerID, c.ContainerID) || !merge(&out.Pod, c.Pod) {
			return Cgroup{}
		}
	}
	return out
}

// merge sets *dst to v where *dst is unset, and reports whether they agree.
func merge(dst *string, v string) bool {
	switch {
	case v == "" || *dst == v:
	case *dst == "":
		*dst = v
	default:
		return false
	}
	return true
}

// classify reads one cgroup path. Each shape is anchored at the path's
// first folder, the one its daemon makes at the hierarchy's root; what
// follows the recognised part (a step's task folder, a container's own
// sub-cgroups, a nested engine's) does not change who the process runs
// for, as the host sees it.
func classify(path string) Cgroup {
	p := strings.Split(path[1:], "/")
	at := func(i int) string {
		if i < len(p) {
			return p[i]
		}
		return ""
	}
	switch first := p[0]; {
	// Slurm, cgroup v1: /slurm/uid_U/job_J/step_S/..., or /slurm_NODE/...
	// where slurm.conf's CgroupMountpoint names the node.
	case first == "slurm" || strings.HasPrefix(first, "slurm_") && len(first) > len("slurm_"):
		if uid, ok := strings.CutPrefix(at(1), "uid_"); ok && digits(uid) {
			return Cgroup{SlurmJob: jobID(at(2))}
		}
	// Slurm, cgroup v2: slurmd's scope, as "slurmstepd.scope" or, with
	// several slurmd on one machine, "NODE_slurmstepd.scope".
	case first == "system.slice" && (at(1) == "slurmstepd.scope" ||
		strings.HasSuffix(at(1), "_slurmstepd.scope") && len(at(1)) > len("_slurmstepd.scope")):
		return Cgroup{SlurmJob: jobID(at(2))}
	// Docker with the systemd cgroup driver.
	case first == "system.slice":
		return Cgroup{ContainerID: scopeID(at(1), "docker-")}
	// Docker with the cgroupfs driver.
	case first == "docker":
		if hexID(at(1)) {
			return Cgroup{ContainerID: at(1)}
		}
	// Podman as root; libpod-conmon-ID.scope is its monitor, not the
	// container, and does not match.
	case first == "machine.slice":
		return Cgroup{ContainerID: scopeID(at(1), "libpod-")}
	// Rootless Podman, in the user's own delegated subtree: the only shape
	// a user can make, and the user's own.
	case first == "user.slice":
		uid, ok := strings.CutPrefix(at(1), "user-")
		uid, ok2 := strings.CutSuffix(uid, ".slice")
		if !ok || !ok2 || !digits(uid) || at(2) != "user@"+uid+".service" {
			break
		}
		for _, c := range p[3:] {
			if id := scopeID(c, "libpod-"); id != "" {
				return Cgroup{ContainerID: id}
			}
		}
	// Kubernetes, systemd cgroup driver:
	// /kubepods.slice[/kubepods-QOS.slice]/kubepods[-QOS]-podUID.slice/RUNTIME-ID.scope
	case first == "kubepods.slice":
		prefix, i := "kubepods-", 1
		if qos, ok := strings.CutPrefix(at(1), "kubepods-"); ok && (qos == "burstable.slice" || qos == "besteffort.slice") {
			prefix, i = "kubepods-"+strings.TrimSuffix(qos, ".slice")+"-", 2
		}
		// systemd reads "-" in a slice's name as a level of slices, so
		// the kubelet writes the uid's dashes as underscores
		uid, ok := strings.CutPrefix(at(i), prefix+"pod")
		uid, ok2 := strings.CutSuffix(uid, ".slice")
		if !ok || !ok2 || strings.Contains(uid, "-") {
			break
		}
		if uid = strings.ReplaceAll(uid, "_", "-"); !podUID(uid) {
			break
		}
		c := Cgroup{Pod: uid}
		for _, runtime := range []string{"cri-containerd-", "crio-", "docker-"} {
			if id := scopeID(at(i+1), runtime); id != "" {
				c.ContainerID = id
			}
		}
		return c
	// Kubernetes, cgroupfs driver: /kubepods[/QOS]/podUID/ID
	case first == "kubepods":
		i := 1
		if at(1) == "burstable" || at(1) == "besteffort" {
			i = 2
		}
		uid, ok := strings.CutPrefix(at(i), "pod")
		if !ok || !podUID(uid) {
			break
		}
		c := Cgroup{Pod: uid}
		if hexID(at(i + 1)) {
			c.ContainerID = at(i + 1)
		}
		return c
	}
	return Cgroup{}
}

// jobID is J of a "job_J" folder, or "" when s is not one: J is a job id
// as slurmstepd writes it, 1 to 10 digits without a leading zero.
func jobID(s string) string {
	j, ok := strings.CutPrefix(s, "job_")
	if !ok || !digits(j) || len(j) > 10 || j[0] == '0' {
		return ""
	}
	return j
}

// scopeID is ID of a "PREFIX<ID>.scope" folder, "" when s is not one.
func scopeID(s, prefix string) string {
	id, ok := strings.CutPrefix(s, prefix)
	id, ok2 := strings.CutSuffix(id, ".scope")
	if !ok || !ok2 || !hexID(id) {
		return ""
	}
	return id
}

// hexID reports whether s is a full container id: 64 lowercase hex digits.
func hexID(s string) bool {
	if len(s) != fullID {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return true
}

// podUID reports whether s is a pod uid as Kubernetes makes them: a
// lowercase UUID, 8-4-4-4-12 hex digits.
func podUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if !isHex(s[i]) {
				return false
			}
		}
	}
	return true
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }

// digits reports whether s is a non-empty run of ASCII digits.
func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
