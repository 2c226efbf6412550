package attrib

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpumon/gpumon/internal/hosttext"
	"github.com/gpumon/gpumon/internal/lines"
)

// The probe prints every record of its cgroups, squeue and ps sections on
// a line that starts with the run's secret nonce and a kind:
// "PREFIXpid 4242", "PREFIXjob 1240 1233_5 gpu account=vision train",
// "PREFIXctr ID NAMES", PREFIX being "@@gpumon:NONCE:" (see
// probe.RecordPrefix). Text a user chose (a job's name) or a host printed
// (an error) cannot start a line with a nonce it never saw, so it can add
// to a record, never forge one.
const (
	kindPID       = "pid" // a process's /proc/PID/cgroup follows
	kindCut       = "cut" // the one before was longer than the probe reads
	kindJob       = "job"
	kindContainer = "ctr"
)

// Bounds on what the sections can make fetch hold.
const (
	maxPIDs       = 8192 // pid records read; the probe lists at most 4,096
	maxJobs       = 1024 // squeue records read; the probe asks for at most 1,024
	maxContainers = 8192 // docker/podman ps records read
	MaxName       = 128  // bytes kept of a job's or container's name
	MaxPartition  = 128  // bytes kept of a job's partition
	MaxAccount    = 128  // bytes kept of a job's account
	maxSkipped    = 20   // records named as not used; the rest are counted
	maxQuoted     = 40   // bytes of a bad field quoted in a reason
)

// ParseCgroups reads the cgroups section: for each pid record, the
// /proc/PID/cgroup text that follows it, parsed with ParseCgroup. A pid
// listed twice, one cut short on the host, or one whose file could not be
// read (it ended) is there with an empty Cgroup: unknown.
func ParseCgroups(body []byte, prefix string) map[int]Cgroup {
	out := map[int]Cgroup{}
	pidTag, cutTag := prefix+kindPID+" ", prefix+kindCut
	var (
		cur   = -1 // the pid whose text is being read; -1 for none
		start int  // where its text starts in body
		bad   bool // it was listed twice or cut
		twice = map[int]bool{}
	)
	end := func(at int) {
		if cur < 0 {
			return
		}
		if bad || twice[cur] {
			out[cur] = Cgroup{}
		} else {
			out[cur] = ParseCgroup(string(body[start:at]))
		}
	}
	for line := range lines.All(body) {
		switch s := string(line.Text); {
		case strings.HasPrefix(s, pidTag):
			end(line.Start)
			pid, err := strconv.Atoi(s[len(pidTag):])
			if err != nil || pid <= 0 || !digits(s[len(pidTag):]) {
				cur = -1 // its text is skipped: it belongs to no pid
				continue
			}
			if len(out) >= maxPIDs {
				return out
			}
			if _, seen := out[pid]; seen {
				twice[pid] = true
			}
			cur, start, bad = pid, line.Next, false
		case s == cutTag:
			bad = true
		}
	}
	end(len(body))
	return out
}

func listed(jobs map[string]Job, id string) bool {
	_, ok := jobs[id]
	return ok
}

// A Job is what squeue says about one job.
type Job struct {
	ID        string // as squeue prints it (%i): "1233_5" for task 5 of array job 1233
	Partition string // %P, printable, cut at MaxPartition bytes
	Account   string // %a, printable, cut at MaxAccount bytes; "" where squeue gave none
	Name      string // %j, a newline in it a space, printable, cut at MaxName bytes
}

// ParseSqueue reads the squeue section, made by
//
//	squeue --noheader --jobs=LIST --format="PREFIXjob %A %i %P account=%a %j"
//
// and returns the jobs by %A, the numeric id a cgroup names. The name comes
// last, so spaces in it shift no field; a newline in it makes the lines
// after it (which hold no nonce) part of it. The account is marked
// (accountMark) so that a record without it, as the probe printed before
// it asked (PREFIXjob %A %i %P %j), still reads: its account is "". A
// record for a job not in asked, or a job listed twice, is not used:
// squeue prints each job asked for once. skipped names the records not
// used (at most maxSkipped, then how many more).
func ParseSqueue(body []byte, prefix string, asked map[string]bool) (jobs map[string]Job, skipped []string) {
	jobs = map[string]Job{}
	var (
		tag    = prefix + kindJob + " "
		cur    string // %A of the record being read, "" for none
		name   strings.Builder
		twice  = map[string]bool{}
		nSkip  int
		nRecs  int
		finish = func() {
			if cur == "" {
				return
			}
			j := jobs[cur]
			j.Name = hosttext.Clip(hosttext.Printable(strings.TrimSpace(name.String())), MaxName)
			jobs[cur] = j
		}
	)
	skip := func(format string, args ...any) {
		if nSkip++; nSkip <= maxSkipped {
			skipped = append(skipped, fmt.Sprintf(format, args...))
		}
	}
	for l := range lines.All(body) {
		line := string(l.Text)
		rest, isRecord := strings.CutPrefix(line, tag)
		if !isRecord {
			// the rest of a name with a newline, or squeue's own words
			// before any record; either way no record of its own
			if cur != "" && name.Len() <= 4*MaxName {
				name.WriteByte(' ')
				name.WriteString(line)
			}
			continue
		}
		finish()
		cur = ""
		name.Reset()
		if nRecs++; nRecs > maxJobs {
			skip("squeue printed more than %d jobs, more than were asked for; the rest are not used", maxJobs)
			break
		}
		numeric, rest, _ := strings.Cut(rest, " ")
		display, rest, _ := strings.Cut(rest, " ")
		partition, rest, _ := strings.Cut(rest, " ")
		account, jobName := cutAccount(rest)
		switch {
		case !digits(numeric) || !displayID(display, numeric):
			skip("squeue record %q is not a job", quote(numeric+" "+display))
		case !asked[numeric]:
			skip("squeue answered for job %s, which was not asked for; not used", numeric)
		case twice[numeric]:
		case listed(jobs, numeric):
			twice[numeric] = true
			delete(jobs, numeric)
			skip("squeue listed job %s twice; neither record is used", numeric)
		default:
			cur = numeric
			jobs[cur] = Job{ID: display, Partition: hosttext.Clip(hosttext.Printable(partition), MaxPartition), Account: account}
			name.WriteString(jobName)
		}
	}
	finish()
	if nSkip > maxSkipped {
		skipped = append(skipped, fmt.Sprintf("%d more squeue records not used", nSkip-maxSkipped))
	}
	return jobs, skipped
}

// accountMark starts the account's field of a squeue record: a name (the
// field after it in a record without an account) rarely starts so.
const accountMark = "account="

// cutAccount splits the account, printable and cut at MaxAccount bytes,
// off the rest of a record after its partition: "" and rest itself where
// the record has no account. squeue prints an account it does not know
// (a cluster without accounting) as "(null)", which is none.
func cutAccount(rest string) (account, after string) {
	marked, ok := strings.CutPrefix(rest, accountMark)
	if !ok {
		return "", rest
	}
	account, after, _ = strings.Cut(marked, " ")
	if account == "(null)" {
		return "", after
	}
	return hosttext.Clip(hosttext.Printable(account), MaxAccount), after
}

// displayID reports whether s is a job id as squeue's %i prints the job
// whose numeric id (%A) is numeric: that id itself, an array task
// ("1233_5", whose %A is its own id), or a heterogeneous job's component
// ("1234+1").
func displayID(s, numeric string) bool {
	if s == numeric {
		return true
	}
	base, task, ok := strings.Cut(s, "_")
	if !ok {
		base, task, ok = strings.Cut(s, "+")
	}
	return ok && digits(base) && digits(task) && len(s) <= 32
}

// ParseContainers reads the section of one
//
//	docker ps --no-trunc --format "PREFIXctr {{.ID}} {{.Names}}"
//
// (or podman's): each running container's full id and its first name. An
// id listed twice is not used. skipped names the records not used.
func ParseContainers(body []byte, prefix string) (names map[string]string, skipped []string) {
	names = map[string]string{}
	tag := prefix + kindContainer + " "
	twice := map[string]bool{}
	nSkip, nRecs := 0, 0
	skip := func(format string, args ...any) {
		if nSkip++; nSkip <= maxSkipped {
			skipped = append(skipped, fmt.Sprintf(format, args...))
		}
	}
	for line := range lines.All(body) {
		rest, ok := strings.CutPrefix(string(line.Text), tag)
		if !ok {
			continue // a warning of the engine's own, never a record
		}
		if nRecs++; nRecs > maxContainers {
			skip("more than %d containers listed; the rest are not used", maxContainers)
			break
		}
		id, list, _ := strings.Cut(rest, " ")
		first, _, _ := strings.Cut(list, ",")
		switch _, dup := names[id]; {
		case !hexID(id):
			skip("container id %q is not 64 hex digits", quote(id))
		case twice[id]:
		case dup:
			twice[id] = true
			delete(names, id)
			skip("container %s listed twice; neither record is used", id[:shortID])
		default:
			names[id] = hosttext.Clip(hosttext.Printable(strings.TrimSpace(first)), MaxName)
		}
	}
	if nSkip > maxSkipped {
		skipped = append(skipped, fmt.Sprintf("%d more container records not used", nSkip-maxSkipped))
	}
	return names, skipped
}

func quote(s string) string {
	return hosttext.Clip(hosttext.Printable(s), maxQuoted)
}

// Attribution is a process's seven columns of load_data.csv.
type Attribution struct {
	SlurmJob, SlurmJobName, SlurmPartition, SlurmAccount string
	Container, ContainerName                             string
	Pod                                                  string
}

// Attribute names what c says: slurm_job is squeue's %i where squeue
// answered for the job, else the numeric id from the cgroup (and no name,
// partition or account); the container's name is the first docker or
// podman gave for its id.
func Attribute(c Cgroup, jobs map[string]Job, containers map[string]string) Attribution {
	a := Attribution{SlurmJob: c.SlurmJob, Container: c.Container(), Pod: c.Pod}
	if j, ok := jobs[c.SlurmJob]; ok && c.SlurmJob != "" {
		a.SlurmJob, a.SlurmJobName, a.SlurmPartition, a.SlurmAccount = j.ID, j.Name, j.Partition, j.Account
	}
	if c.ContainerID != "" {
		a.ContainerName = containers[c.ContainerID]
	}
	return a
}
