package fetch

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/probe"
)

const (
	ctrID  = "3f4e9a1c2b7d8e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
	podUID = "1b2c3d4e-5f60-4a5b-8c9d-0123456789ab"
)

// Three GPU processes: one in Slurm array task 1233_5 (job id 1240), one
// in a Docker container, one in a Kubernetes pod; and a process on no GPU.
var (
	attribApps = appsHeader + "4242, GPU-aaaa, 30000\n5151, GPU-aaaa, 2000\n6161, GPU-bbbb, 1000\n"
	attribPS   = shellLine + " 4242 alice 60 python train.py\n 5151 root 60 python serve.py\n 6161 bob 60 python infer.py\n"
	cgroupsSec = section{name: probe.SectionCgroups, body: "@R@pid 4242\n0::/system.slice/slurmstepd.scope/job_1240/step_0/user/task_0\n" +
		"@R@pid 5151\n0::/system.slice/docker-" + ctrID + ".scope\n" +
		"@R@pid 6161\n0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f60_4a5b_8c9d_0123456789ab.slice/cri-containerd-" + ctrID[:60] + "ffff.scope\n" +
		"@R@pid 9999\n0::/system.slice/slurmstepd.scope/job_77/step_0\n"}
	squeueSec      = section{name: probe.SectionSqueue, body: "@R@job 1240 1233_5 gpu account=nlp-lab sweep <b>lr</b>\n"}
	dockerSec      = section{name: probe.SectionDocker, body: "@R@ctr " + ctrID + " trainer\n"}
	attributedHost = hostOutput{gpus: twoGPUs, apps: attribApps, ps: attribPS, attrib: []section{cgroupsSec, squeueSec, dockerSec}}
)

// attribCells are a process row's attribution cells.
type attribCells struct {
	PID                                                  int64
	SlurmJob, SlurmJobName, SlurmPartition, SlurmAccount string
	Container, ContainerName, Pod                        string
}

func attribOf(rows []loaddata.Row) []attribCells {
	var out []attribCells
	for _, r := range rows {
		if r.PID.Valid {
			out = append(out, attribCells{r.PID.Value, r.SlurmJob, r.SlurmJobName, r.SlurmPartition, r.SlurmAccount, r.Container, r.ContainerName, r.Pod})
		}
	}
	return out
}

func TestBuildAttribution(t *testing.T) {
	named := []attribCells{
		{PID: 4242, SlurmJob: "1233_5", SlurmJobName: "sweep <b>lr</b>", SlurmPartition: "gpu", SlurmAccount: "nlp-lab"},
		{PID: 5151, Container: "3f4e9a1c2b7d", ContainerName: "trainer"},
		{PID: 6161, Container: "3f4e9a1c2b7d", Pod: podUID},
	}
	unnamed := []attribCells{
		{PID: 4242, SlurmJob: "1240"},
		{PID: 5151, Container: "3f4e9a1c2b7d"},
		{PID: 6161, Container: "3f4e9a1c2b7d", Pod: podUID},
	}
	tests := []struct {
		name    string
		attrib  []section
		want    []attribCells
		warning string
	}{
		{
			name:   "squeue and docker answered",
			attrib: []section{cgroupsSec, squeueSec, dockerSec},
			want:   named,
		},
		{
			name:   "a squeue record without an account, as an older probe asked",
			attrib: []section{cgroupsSec, {name: probe.SectionSqueue, body: "@R@job 1240 1233_5 gpu sweep <b>lr</b>\n"}},
			want: []attribCells{{PID: 4242, SlurmJob: "1233_5", SlurmJobName: "sweep <b>lr</b>", SlurmPartition: "gpu"},
				unnamed[1], unnamed[2]},
		},
		{
			name:   "no squeue on the host, containers = none: ids only",
			attrib: []section{cgroupsSec},
			want:   unnamed,
		},
		{
			name: "the job ended before squeue ran: no warning",
			attrib: []section{cgroupsSec, {name: probe.SectionSqueue, rc: 1,
				body: "slurm_load_jobs error: Invalid job id specified\n"}},
			want: unnamed,
		},
		{
			name: "squeue cannot reach slurmctld",
			attrib: []section{cgroupsSec, {name: probe.SectionSqueue, rc: 1,
				body: "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"}},
			want:    unnamed,
			warning: "squeue failed (exit 1): slurm_load_jobs error: Unable to contact slurm controller (connect failure); Slurm job names unknown",
		},
		{
			name:    "squeue hung",
			attrib:  []section{cgroupsSec, {name: probe.SectionSqueue, rc: 124}},
			want:    unnamed,
			warning: "squeue did not answer in time (exit 124); Slurm job names unknown",
		},
		{
			name: "squeue answered for a job not asked for, and twice for one that was",
			attrib: []section{cgroupsSec, {name: probe.SectionSqueue,
				body: "@R@job 9 9 gpu other\n@R@job 1240 1240 gpu a\n@R@job 1240 1240 gpu b\n"}},
			want:    unnamed,
			warning: "squeue answered for job 9, which was not asked for; not used; squeue listed job 1240 twice; neither record is used",
		},
		{
			name: "the account may not use docker's socket",
			attrib: []section{cgroupsSec, squeueSec, {name: probe.SectionDocker, rc: 1,
				body: "permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock\n"}},
			want: []attribCells{named[0], unnamed[1], unnamed[2]},
			warning: "docker ps failed (exit 1): permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock; " +
				"container names unknown",
		},
		{
			name: "podman",
			attrib: []section{cgroupsSec, {name: probe.SectionPodman,
				body: "@R@ctr " + ctrID + " trainer\n"}},
			want: []attribCells{unnamed[0], named[1], unnamed[2]},
		},
		{
			name: "the cgroups were more than the probe reads",
			attrib: []section{{name: probe.SectionCgroups, rc: 3,
				body: "gpumon probe: /proc/PID/cgroup printed more than 655360 bytes (cut off on the host)\n"}},
			want: []attribCells{{PID: 4242}, {PID: 5151}, {PID: 6161}},
			warning: "reading the processes' cgroups failed (exit 3): gpumon probe: /proc/PID/cgroup printed more than 655360 bytes (cut off on the host); " +
				"Slurm jobs and containers unknown",
		},
		{
			name: "records without this run's nonce forge nothing",
			attrib: []section{{name: probe.SectionCgroups, body: "@@gpumon:other:pid 4242\n0::/system.slice/slurmstepd.scope/job_1240/step_0\n"},
				{name: probe.SectionSqueue, body: "@@gpumon:other:job 1240 1240 gpu forged\n"}},
			want: []attribCells{{PID: 4242}, {PID: 5151}, {PID: 6161}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := hostOutput{gpus: twoGPUs, apps: attribApps, ps: attribPS, attrib: tt.attrib}
			r := buildResult("gpu01", "n0nce", out.bytes("n0nce"), nil, at)
			if r.Status != hoststatus.OK || r.Error != tt.warning {
				t.Errorf("status %q, host_error %q; want ok, %q", r.Status, r.Error, tt.warning)
			}
			if diff := cmp.Diff(tt.want, attribOf(r.Rows)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// BenchmarkBuild is one host's answer turned into rows: three processes,
// without and with the sections that say who they run for.
func BenchmarkBuild(b *testing.B) {
	for _, bc := range []struct {
		name string
		out  hostOutput
	}{
		{"plain", hostOutput{gpus: twoGPUs, apps: attribApps, ps: attribPS}},
		{"attributed", attributedHost},
	} {
		b.Run(bc.name, func(b *testing.B) {
			out := bc.out.bytes("n0nce")
			for b.Loop() {
				if r := buildResult("gpu01", "n0nce", out, nil, at); r.Status != hoststatus.OK {
					b.Fatal(r.Error)
				}
			}
		})
	}
}
