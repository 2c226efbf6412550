package attrib

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Container ids and pod uids as the engines make them.
const (
	id1  = "3f4e9a1c2b7d8e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
	id2  = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	pod  = "1b2c3d4e-5f60-4a5b-8c9d-0123456789ab"
	podU = "1b2c3d4e_5f60_4a5b_8c9d_0123456789ab" // as the systemd driver writes it
)

// v1 is a cgroup v1 host's file with path in the hierarchies a job or a
// container engine uses, the others at the root.
func v1(path string) string {
	return "12:pids:" + path + "\n11:memory:" + path + "\n10:freezer:" + path +
		"\n9:cpuset:/\n8:devices:" + path + "\n1:name=systemd:/user.slice/user-1000.slice/session-3.scope\n0::/user.slice/user-1000.slice/session-3.scope\n"
}

// v2 is a cgroup v2 host's file.
func v2(path string) string { return "0::" + path + "\n" }

func TestParseCgroup(t *testing.T) {
	tests := []struct {
		name string
		text string
		want Cgroup
	}{
		// Slurm
		{"slurm v1", v1("/slurm/uid_1000/job_4242/step_0/task_0"), Cgroup{SlurmJob: "4242"}},
		{"slurm v1, batch step", v1("/slurm/uid_1000/job_4242/step_batch"), Cgroup{SlurmJob: "4242"}},
		{"slurm v1, node-named mount point", v1("/slurm_gpu01/uid_1000/job_4242/step_0"), Cgroup{SlurmJob: "4242"}},
		{"slurm v2", v2("/system.slice/slurmstepd.scope/job_1240/step_0/user/task_0"), Cgroup{SlurmJob: "1240"}},
		{"slurm v2, node-named scope", v2("/system.slice/gpu01_slurmstepd.scope/job_1240/step_extern/user/task_special"), Cgroup{SlurmJob: "1240"}},
		{"slurm v2, slurmstepd's own folder", v2("/system.slice/slurmstepd.scope/system"), Cgroup{}},
		{"slurm v1 without a uid folder", v1("/slurm/job_4242/step_0"), Cgroup{}},
		{"slurm, job id with a leading zero", v2("/system.slice/slurmstepd.scope/job_0042/step_0"), Cgroup{}},
		{"slurm, job id of 11 digits", v2("/system.slice/slurmstepd.scope/job_12345678901/step_0"), Cgroup{}},
		{"slurm, job id not a number", v2("/system.slice/slurmstepd.scope/job_42a/step_0"), Cgroup{}},
		{"slurm, bare _slurmstepd.scope", v2("/system.slice/_slurmstepd.scope/job_42/step_0"), Cgroup{}},
		{"slurm, bare slurm_", v1("/slurm_/uid_1000/job_42/step_0"), Cgroup{}},

		// Docker, Podman
		{"docker, cgroupfs driver", v1("/docker/" + id1), Cgroup{ContainerID: id1}},
		{"docker in docker: the host's container", v2("/docker/" + id1 + "/docker/" + id2), Cgroup{ContainerID: id1}},
		{"docker, systemd driver", v2("/system.slice/docker-" + id1 + ".scope"), Cgroup{ContainerID: id1}},
		{"kind node: the host's container", v2("/system.slice/docker-" + id1 + ".scope/kubelet.slice/kubelet-kubepods.slice"), Cgroup{ContainerID: id1}},
		{"podman as root", v2("/machine.slice/libpod-" + id1 + ".scope/container"), Cgroup{ContainerID: id1}},
		{"podman's conmon is not the container", v2("/machine.slice/libpod-conmon-" + id1 + ".scope"), Cgroup{}},
		{"rootless podman", v2("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + id1 + ".scope/container"), Cgroup{ContainerID: id1}},
		{"rootless podman, uid mismatch", v2("/user.slice/user-1000.slice/user@1001.service/user.slice/libpod-" + id1 + ".scope"), Cgroup{}},
		{"docker id of 63 digits", v2("/docker/" + id1[:63]), Cgroup{}},
		{"docker id in capitals", v2("/docker/" + strings.ToUpper(id1)), Cgroup{}},
		{"docker id without .scope", v2("/system.slice/docker-" + id1), Cgroup{}},
		{"docker scope of another name", v2("/system.slice/containerd-" + id1 + ".scope"), Cgroup{}},

		// Kubernetes
		{"kubernetes, systemd, burstable, containerd", v2("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + podU + ".slice/cri-containerd-" + id1 + ".scope"),
			Cgroup{ContainerID: id1, Pod: pod}},
		{"kubernetes, systemd, besteffort, cri-o", v2("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + podU + ".slice/crio-" + id1 + ".scope"),
			Cgroup{ContainerID: id1, Pod: pod}},
		{"kubernetes, systemd, guaranteed, docker", v1("/kubepods.slice/kubepods-pod" + podU + ".slice/docker-" + id1 + ".scope"),
			Cgroup{ContainerID: id1, Pod: pod}},
		{"kubernetes, systemd, cri-o's conmon: the pod only", v2("/kubepods.slice/kubepods-pod" + podU + ".slice/crio-conmon-" + id1 + ".scope"),
			Cgroup{Pod: pod}},
		{"kubernetes, systemd, in the pod's slice itself", v2("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + podU + ".slice"),
			Cgroup{Pod: pod}},
		{"kubernetes, systemd, qos of the pod differs from its parent's", v2("/kubepods.slice/kubepods-burstable.slice/kubepods-besteffort-pod" + podU + ".slice/cri-containerd-" + id1 + ".scope"),
			Cgroup{}},
		// systemd would read the dashes as levels of slices: not a slice it makes
		{"kubernetes, systemd, uid with dashes", v2("/kubepods.slice/kubepods-pod" + pod + ".slice/cri-containerd-" + id1 + ".scope"), Cgroup{}},
		{"kubernetes, cgroupfs, burstable", v1("/kubepods/burstable/pod" + pod + "/" + id1), Cgroup{ContainerID: id1, Pod: pod}},
		{"kubernetes, cgroupfs, guaranteed", v2("/kubepods/pod" + pod + "/" + id1), Cgroup{ContainerID: id1, Pod: pod}},
		{"kubernetes, cgroupfs, pod uid with underscores", v2("/kubepods/pod" + podU + "/" + id1), Cgroup{}},
		{"kubernetes, cgroupfs, uid in capitals", v2("/kubepods/pod" + strings.ToUpper(pod) + "/" + id1), Cgroup{}},

		// Shapes not anchored where their daemons put them
		{"a user's folder named like a job", v2("/user.slice/user-1000.slice/user@1000.service/app.slice/slurm/uid_0/job_42/step_0"), Cgroup{}},
		{"a user's folder named like slurmstepd's", v2("/user.slice/user-1000.slice/user@1000.service/system.slice/slurmstepd.scope/job_42/step_0"), Cgroup{}},
		{"a user's folder named like docker's", v2("/user.slice/user-1000.slice/user@1000.service/docker/" + id1), Cgroup{}},
		{"a user's folder named like a pod", v2("/user.slice/user-1000.slice/user@1000.service/kubepods/pod" + pod + "/" + id1), Cgroup{}},
		{"a path with a colon named like a job", "0::/user.slice/x:/slurm/uid_0/job_42/step_0\n", Cgroup{}},
		{"a session", v2("/user.slice/user-1000.slice/session-3.scope"), Cgroup{}},
		{"the root", "0::/\n", Cgroup{}},
		{"seen from another cgroup namespace", v2("/../../system.slice/docker-" + id1 + ".scope"), Cgroup{}},

		// Lines that agree, and lines that do not
		{"v1 job, v2 docker: both", "4:freezer:/slurm/uid_0/job_42/step_0\n0::/system.slice/docker-" + id1 + ".scope\n", Cgroup{SlurmJob: "42", ContainerID: id1}},
		{"two jobs", "4:freezer:/slurm/uid_0/job_42/step_0\n0::/system.slice/slurmstepd.scope/job_43/step_0\n", Cgroup{}},
		{"two containers", "5:pids:/docker/" + id1 + "\n0::/system.slice/docker-" + id2 + ".scope\n", Cgroup{}},
		{"two pods", "5:pids:/kubepods/pod" + pod + "\n0::/kubepods/pod" + strings.Replace(pod, "1", "2", 1) + "\n", Cgroup{}},

		// Text the kernel does not print
		{"a hierarchy listed twice", "0::/system.slice/docker-" + id1 + ".scope\n0::/system.slice/slurmstepd.scope/job_42/step_0\n", Cgroup{}},
		{"a line without controllers", "0:/docker/" + id1 + "\n", Cgroup{}},
		{"a hierarchy id that is not a number", "x::/docker/" + id1 + "\n", Cgroup{}},
		{"a relative path", "0::docker/" + id1 + "\n", Cgroup{}},
		{"a blank line", "\n0::/docker/" + id1 + "\n", Cgroup{}},
		{"an error message", "sh: 1: cannot open /proc/4242/cgroup: No such file\n", Cgroup{}},
		{"nothing", "", Cgroup{}},
		{"without the last newline", "0::/docker/" + id1, Cgroup{ContainerID: id1}},
		{"longer than the probe reads", "0::/docker/" + id1 + "/" + strings.Repeat("a", maxCgroupText) + "\n", Cgroup{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, ParseCgroup(tt.text)); diff != "" {
				t.Errorf("ParseCgroup(%q) (-want +got):\n%s", tt.text, diff)
			}
		})
	}
}

func TestContainerIsTwelveDigits(t *testing.T) {
	if got := (Cgroup{ContainerID: id1}).Container(); got != "3f4e9a1c2b7d" {
		t.Errorf("Container() = %q", got)
	}
	if got := (Cgroup{}).Container(); got != "" {
		t.Errorf("Container() of none = %q", got)
	}
}

// What a kernel prints for any path: the parser never panics, and what it
// finds is always of the documented form.
func FuzzParseCgroup(f *testing.F) {
	for _, s := range []string{
		v1("/slurm/uid_1000/job_4242/step_0"),
		v2("/system.slice/slurmstepd.scope/job_1240/step_0/user/task_0"),
		v2("/system.slice/docker-" + id1 + ".scope"),
		v2("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + podU + ".slice/cri-containerd-" + id1 + ".scope"),
		v1("/kubepods/burstable/pod" + pod + "/" + id1),
		v2("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + id1 + ".scope/container"),
		"0::/\n0::/\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		c := ParseCgroup(text)
		if c.SlurmJob != "" && jobID("job_"+c.SlurmJob) != c.SlurmJob {
			t.Errorf("job %q", c.SlurmJob)
		}
		if c.ContainerID != "" && !hexID(c.ContainerID) {
			t.Errorf("container %q", c.ContainerID)
		}
		if c.Pod != "" && !podUID(c.Pod) {
			t.Errorf("pod %q", c.Pod)
		}
		// what it finds, it found in the text
		for _, v := range []string{"job_" + c.SlurmJob, c.ContainerID} {
			if v != "job_" && !strings.Contains(text, v) {
				t.Errorf("%q is not in the text", v)
			}
		}
		if c.Pod != "" && !strings.Contains(text, c.Pod) && !strings.Contains(text, strings.ReplaceAll(c.Pod, "-", "_")) {
			t.Errorf("pod %q is not in the text", c.Pod)
		}
	})
}
