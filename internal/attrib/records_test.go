package attrib

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// prefix is what the probe puts before each record: "@@gpumon:NONCE:".
const prefix = "@@gpumon:0123abcd:"

func TestParseCgroups(t *testing.T) {
	rec := func(kind, rest string) string { return prefix + kind + rest + "\n" }
	tests := []struct {
		name string
		body string
		want map[int]Cgroup
	}{
		{
			name: "two processes, one gone before the probe read it",
			body: rec("pid", " 4242") + v2("/system.slice/slurmstepd.scope/job_42/step_0") +
				rec("pid", " 5151") +
				rec("pid", " 6161") + v1("/docker/"+id1),
			want: map[int]Cgroup{4242: {SlurmJob: "42"}, 5151: {}, 6161: {ContainerID: id1}},
		},
		{
			name: "a process cut short on the host is unknown",
			body: rec("pid", " 4242") + v2("/docker/"+id1) + rec("cut", ""),
			want: map[int]Cgroup{4242: {}},
		},
		{
			name: "a pid listed twice is unknown",
			body: rec("pid", " 4242") + v2("/docker/"+id1) + rec("pid", " 4242") + v2("/docker/"+id1),
			want: map[int]Cgroup{4242: {}},
		},
		{
			name: "a record without this run's nonce is part of the text before it",
			body: rec("pid", " 4242") + v2("/docker/"+id1) + "@@gpumon:ffff:pid 5151\n" + v2("/docker/"+id2),
			want: map[int]Cgroup{4242: {}},
		},
		{
			name: "text before any record, and a record whose pid is not a number",
			body: "sh: warning\n0::/docker/" + id1 + "\n" + rec("pid", " x1") + v2("/docker/"+id1) + rec("pid", " -3") + rec("pid", " 7") + v2("/docker/"+id2),
			want: map[int]Cgroup{7: {ContainerID: id2}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, ParseCgroups([]byte(tt.body), prefix)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseCgroupsBounded(t *testing.T) {
	var b strings.Builder
	for pid := 1; pid <= maxPIDs+10; pid++ {
		fmt.Fprintf(&b, "%spid %d\n0::/\n", prefix, pid)
	}
	if got := len(ParseCgroups([]byte(b.String()), prefix)); got != maxPIDs {
		t.Errorf("%d pids read, want %d", got, maxPIDs)
	}
}

func TestParseSqueue(t *testing.T) {
	rec := func(s string) string { return prefix + "job " + s + "\n" }
	asked := map[string]bool{"1240": true, "4242": true, "77": true}
	tests := []struct {
		name    string
		body    string
		want    map[string]Job
		skipped []string
	}{
		{
			name: "an array task and a plain job; spaces in a name",
			body: rec("1240 1233_5 gpu sweep lr=3e-4") + rec("4242 4242 a100,h100 my  training run "),
			want: map[string]Job{
				"1240": {ID: "1233_5", Partition: "gpu", Name: "sweep lr=3e-4"},
				"4242": {ID: "4242", Partition: "a100,h100", Name: "my  training run"},
			},
		},
		{
			name: "a newline in a name adds to the name, and what follows it forges nothing",
			body: rec("1240 1240 gpu train\njob 4242 4242 gpu forged\n"+prefix[:len(prefix)-1]+"job 77 77 gpu forged too") + rec("77 77 cpu real"),
			want: map[string]Job{
				"1240": {ID: "1240", Partition: "gpu", Name: "train job 4242 4242 gpu forged @@gpumon:0123abcdjob 77 77 gpu forged too"},
				"77":   {ID: "77", Partition: "cpu", Name: "real"},
			},
		},
		{
			name: "a job not asked for, and a job listed twice, are not used",
			body: rec("1240 1240 gpu mine") + rec("999 999 gpu someone else's") + rec("4242 4242 gpu a") + rec("4242 4242 gpu b") + rec("4242 4242 gpu c"),
			want: map[string]Job{"1240": {ID: "1240", Partition: "gpu", Name: "mine"}},
			skipped: []string{
				"squeue answered for job 999, which was not asked for; not used",
				"squeue listed job 4242 twice; neither record is used",
			},
		},
		{
			name: "squeue's complaint before any record; ids that are not ids",
			body: "slurm_load_jobs error: Invalid job id specified\n" + rec("x77 77 gpu n") + rec("77 77x gpu n") + rec("77 7_ gpu n") + rec("77"),
			want: map[string]Job{},
			skipped: []string{
				`squeue record "x77 77" is not a job`,
				`squeue record "77 77x" is not a job`,
				`squeue record "77 7_" is not a job`,
				`squeue record "77 " is not a job`,
			},
		},
		{
			name: "a heterogeneous job's component; markup and control characters in a name",
			body: rec("4242 4242+1 gpu <script>alert(1)</script>\x1b[2J"),
			want: map[string]Job{"4242": {ID: "4242+1", Partition: "gpu", Name: "<script>alert(1)</script>?[2J"}},
		},
		{
			name: "accounts: a plain one, squeue's (null) and an empty one are none",
			body: rec("1240 1233_5 gpu account=vision-lab sweep lr=3e-4") + rec("4242 4242 gpu account=(null) run") + rec("77 77 cpu account= x y"),
			want: map[string]Job{
				"1240": {ID: "1233_5", Partition: "gpu", Account: "vision-lab", Name: "sweep lr=3e-4"},
				"4242": {ID: "4242", Partition: "gpu", Name: "run"},
				"77":   {ID: "77", Partition: "cpu", Name: "x y"},
			},
		},
		{
			name: "a record without an account, as an older probe asked; a name shaped like one after the account",
			body: rec("1240 1240 gpu account train") + rec("4242 4242 gpu account=nlp account=forged"),
			want: map[string]Job{
				"1240": {ID: "1240", Partition: "gpu", Name: "account train"},
				"4242": {ID: "4242", Partition: "gpu", Account: "nlp", Name: "account=forged"},
			},
		},
		{
			name: "an account with markup and control characters; one without end is cut",
			body: rec("1240 1240 gpu account=<b>lab</b>\x07 n") + rec("77 77 gpu account="+strings.Repeat("a", 1000)+" n"),
			want: map[string]Job{
				"1240": {ID: "1240", Partition: "gpu", Account: "<b>lab</b>?", Name: "n"},
				"77":   {ID: "77", Partition: "gpu", Account: strings.Repeat("a", MaxAccount-3) + "…", Name: "n"},
			},
		},
		{
			name: "a name without end is cut",
			body: rec("77 77 gpu "+strings.Repeat("x", 1000)) + strings.Repeat("y\n", 1000),
			want: map[string]Job{"77": {ID: "77", Partition: "gpu", Name: strings.Repeat("x", MaxName-3) + "…"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, skipped := ParseSqueue([]byte(tt.body), prefix, asked)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("jobs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.skipped, skipped); diff != "" {
				t.Errorf("skipped (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseSqueueBounded(t *testing.T) {
	var b strings.Builder
	asked := map[string]bool{}
	for j := 1; j <= maxJobs+30; j++ {
		fmt.Fprintf(&b, "%sjob %d %d gpu n\n", prefix, j, j)
		asked[fmt.Sprint(j)] = true
	}
	jobs, skipped := ParseSqueue([]byte(b.String()), prefix, asked)
	if len(jobs) != maxJobs || len(skipped) != 1 {
		t.Errorf("%d jobs, skipped %q", len(jobs), skipped)
	}
}

func TestParseContainers(t *testing.T) {
	rec := func(s string) string { return prefix + "ctr " + s + "\n" }
	tests := []struct {
		name    string
		body    string
		want    map[string]string
		skipped []string
	}{
		{
			name: "names, several of them, and the engine's warnings",
			body: "WARNING: bridge-nf-call-iptables is disabled\n" + rec(id1+" trainer") + rec(id2+" web,db/alias"),
			want: map[string]string{id1: "trainer", id2: "web"},
		},
		{
			name: "an id listed twice is not used; ids that are not ids",
			body: rec(id1+" a") + rec(id1+" b") + rec(id1[:12]+" short") + rec(strings.ToUpper(id2)+" upper") + rec(id2+" <b>bold</b>\x07"),
			want: map[string]string{id2: "<b>bold</b>?"},
			skipped: []string{
				"container 3f4e9a1c2b7d listed twice; neither record is used",
				`container id "3f4e9a1c2b7d" is not 64 hex digits`,
				`container id "0123456789ABCDEF0123456789ABCDEF01234…" is not 64 hex digits`,
			},
		},
		{
			name: "a record without this run's nonce is nothing",
			body: "@@gpumon:ffff:ctr " + id1 + " forged\n" + rec(id2+" real"),
			want: map[string]string{id2: "real"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, skipped := ParseContainers([]byte(tt.body), prefix)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("names (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.skipped, skipped); diff != "" {
				t.Errorf("skipped (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAttribute(t *testing.T) {
	jobs := map[string]Job{"1240": {ID: "1233_5", Partition: "gpu", Account: "nlp-lab", Name: "sweep"}}
	names := map[string]string{id1: "trainer"}
	tests := []struct {
		name string
		c    Cgroup
		want Attribution
	}{
		{"squeue answered: its id", Cgroup{SlurmJob: "1240"}, Attribution{SlurmJob: "1233_5", SlurmJobName: "sweep", SlurmPartition: "gpu", SlurmAccount: "nlp-lab"}},
		{"squeue did not answer: the cgroup's", Cgroup{SlurmJob: "4242"}, Attribution{SlurmJob: "4242"}},
		{"a named container in a pod", Cgroup{ContainerID: id1, Pod: pod}, Attribution{Container: "3f4e9a1c2b7d", ContainerName: "trainer", Pod: pod}},
		{"a container ps did not list", Cgroup{ContainerID: id2}, Attribution{Container: "0123456789ab"}},
		{"nothing", Cgroup{}, Attribution{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Attribute(tt.c, jobs, names)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
