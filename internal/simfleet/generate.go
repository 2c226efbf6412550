package simfleet

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Users are the accounts Generate and Demo run processes as.
var Users = []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy"}

type job struct{ name, command string }

var jobs = []job{
	{"python", "python train.py --config configs/llama3-8b.yaml --batch-size 32"},
	{"/usr/bin/python3", "/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model meta-llama/Meta-Llama-3-8B --port 8000"},
	{"/opt/conda/bin/python", "/opt/conda/bin/python -u finetune.py --lr 3e-5 --epochs 3 --output /scratch/ft-run7"},
	{"./gpu_burn", "./gpu_burn 3600"},
	{"/root/tools/memhog", "/root/tools/memhog 2048"},
	{"julia", "julia --project=. --threads=8 simulate.jl"},
	{"/usr/local/bin/ollama", "/usr/local/bin/ollama serve"},
	{"python3", "python3 -m torch.distributed.run --nproc_per_node=2 pretrain.py"},
}

// commaJob has a comma and spaces in its executable's path, and commas in its
// arguments: nvidia-smi prints '?' for the comma, ps prints it as is.
var commaJob = job{"/home/erin/my runs/eval,v2.sh", "/home/erin/my runs/eval,v2.sh --tasks mmlu,gsm8k --shots 5"}

// Generate returns n working hosts named gpu-0001…, 8 GPUs each, cycling
// through the Linux captures, with about half the GPUs running processes of
// several users. The same n and seed give the same fleet. Some processes
// span two GPUs (one pid, one row per GPU); some have a comma and spaces in
// their name. Every third host is a Slurm node, each process in a job of
// its own (every fourth an array task); every third, from the second, runs
// its processes in Docker containers (engine docker, so their names are
// there for a fetch with containers = docker). A few have a degraded GPU
// or log XIDs (generatedHealth).
func Generate(n int, seed int64) []HostSpec {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
	caps := linuxCaptures()
	specs := make([]HostSpec, n)
	for i := range specs {
		capName := caps[i%len(caps)]
		totalMiB := 81559
		if m, err := loadModel(capName); err == nil {
			if t, ok := m.intValue("idle", "memory.total"); ok {
				totalMiB = t - m.baseMiB
			}
		}
		s := HostSpec{
			Name:    fmt.Sprintf("gpu-%04d", i+1),
			Capture: capName,
			GPUs:    8,
			CPUs:    []int{64, 96, 128, 192}[rng.IntN(4)],
		}
		s.MemTotalMiB = []int{512, 1024, 2048}[rng.IntN(3)] * 1024
		s.MemUsedMiB = s.MemTotalMiB * (10 + rng.IntN(70)) / 100
		usedPID := map[int]bool{}
		newPID := func() int {
			for {
				p := 1000 + rng.IntN(4_000_000)
				if !usedPID[p] {
					usedPID[p] = true
					return p
				}
			}
		}
		busy := 0
		for g := 0; g < s.GPUs; g++ {
			if rng.IntN(2) == 0 {
				continue
			}
			busy++
			nproc := 1
			if rng.IntN(5) == 0 {
				nproc = 2
			}
			for k := 0; k < nproc; k++ {
				j := jobs[rng.IntN(len(jobs))]
				if rng.IntN(20) == 0 {
					j = commaJob
				}
				p := Process{
					PID:      newPID(),
					User:     Users[rng.IntN(len(Users))],
					Command:  j.command,
					Name:     j.name,
					GPU:      g,
					MemMiB:   totalMiB * (5 + rng.IntN(80/nproc)) / 100,
					ElapsedS: 30 + rng.IntN(14*24*3600),
				}
				s.Processes = append(s.Processes, p)
				// now and then the same process also holds the next GPU
				if k == 0 && g+1 < s.GPUs && rng.IntN(8) == 0 {
					q := p
					q.GPU = g + 1
					q.MemMiB = totalMiB * (5 + rng.IntN(60)) / 100
					s.Processes = append(s.Processes, q)
				}
			}
		}
		s.Load1 = float64(busy)*1.5 + float64(rng.IntN(400))/100
		attribute(&s, i) // after every draw: a seed's fleet is as it was
		s.Health = generatedHealth(capName, i)
		specs[i] = s
	}
	return specs
}

// generatedHealth is what is wrong with host i's GPUs: every 50th host
// (from the 8th) has a degraded GPU 3, by what its capture can show (a
// pending row remap, else uncorrectable ECC errors, else a hardware
// thermal slowdown); every 100th (from the 43rd) logs XID 94 (a contained
// ECC error) on GPU 5 at every poll. Few, so that a fleet stays mostly
// healthy, and a benchmark's fetch reads each kind of health.
func generatedHealth(capName string, i int) []GPUHealth {
	var out []GPUHealth
	if i%50 == 7 {
		g := GPUHealth{GPU: 3}
		m, err := loadModel(capName)
		switch {
		case err != nil:
			return nil
		case m.hasValue("remapped_rows.pending"):
			g.RemapPending = true
		case m.hasValue("ecc.errors.uncorrected.volatile.total"):
			g.ECCUncorrected = 1
		default:
			g.ClockEvents = ClockHWThermal
		}
		out = append(out, g)
	}
	if i%100 == 42 {
		out = append(out, GPUHealth{GPU: 5, XIDs: []int{94}})
	}
	return out
}

// slurmAccount is the Slurm account user's jobs bill, as in the demo: a
// user bills one account (alice vision-lab, bob nlp-lab, and so on).
func slurmAccount(user string) string {
	if slices.Index(Users, user)%2 == 0 {
		return "vision-lab"
	}
	return "nlp-lab"
}

// attribute puts the processes of host i into Slurm jobs (i%3 == 0) or
// Docker containers (i%3 == 1), one each, by pid: a process on two GPUs
// is one process.
func attribute(s *HostSpec, i int) {
	if i%3 == 2 || len(s.Processes) == 0 {
		return
	}
	byPID := map[int]string{}
	for k := range s.Processes {
		p := &s.Processes[k]
		if c, ok := byPID[p.PID]; ok {
			p.Cgroup = c
			continue
		}
		switch n := len(byPID); i % 3 {
		case 0:
			id := 100000 + i*16 + n
			j := SlurmJob{JobID: id, Partition: "gpu", Account: slurmAccount(p.User), Name: "job-" + p.User}
			if n%4 == 3 {
				j.Display = fmt.Sprintf("%d_%d", id-n, n)
			}
			s.Slurm = append(s.Slurm, j)
			p.Cgroup = slurmCgroup(id)
		case 1:
			id := containerID(fmt.Sprintf("%s/%d", s.Name, p.PID))
			s.ContainerEngine = "docker"
			s.Containers = append(s.Containers, Container{ID: id, Names: fmt.Sprintf("%s-%d", p.User, n)})
			p.Cgroup = dockerCgroup(id)
		}
		byPID[p.PID] = p.Cgroup
	}
}

// containerID is a container id (64 hex digits) made from seed.
func containerID(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	return hex.EncodeToString(sum[:])
}

// Demo is the fleet `make demo` shows: every Linux capture model (H100 with
// MIG, H200, RTX 2080 SUPER on drivers 595 and 465), several users, idle
// and busy hosts, one host that refuses connections, one whose driver is
// not loaded; processes in Slurm jobs (one an array task), in a Docker
// container run by root, and in a Kubernetes pod. And GPUs in trouble: one
// that nvidia-smi reports lost, one it leaves out (the driver lists 8, it
// reports 7), a failed row remapping, XIDs 48 and 79 on one GPU, a
// degraded GPU (remap pending, hardware slowdown, uncorrectable ECC
// errors) busy with alice's run, a shared GPU where bob's run computes and
// alice's notebook holds 30 GB idle, and a workstation whose kernel log
// the monitor account may not read. Each host's pmon takes a second, as a
// real one does.
func Demo() []HostSpec {
	const (
		h100   = "nvidia-h100-mig"
		h200   = "nvidia-h200"
		rtx    = "linux-x86_64__nvidia-geforce-rtx-2080-super"
		old465 = "rtx-2080-super__465.27"
		day    = 24 * 3600
	)
	p := func(pid int, user string, gpu, mem, elapsed int, command string) Process {
		return Process{PID: pid, User: user, GPU: gpu, MemMiB: mem, ElapsedS: elapsed, Command: command}
	}
	train := "python train.py --config configs/llama3-8b.yaml --batch-size 32"
	vllm := "/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model meta-llama/Meta-Llama-3-70B --tensor-parallel-size 4"
	eight := func(pid int, user string, mem, elapsed int, command string) []Process {
		var ps []Process
		for g := 0; g < 8; g++ {
			ps = append(ps, p(pid, user, g, mem, elapsed, command))
		}
		return ps
	}
	comma := Process{PID: 88123, User: "erin", GPU: 5, MemMiB: 30211, ElapsedS: 5400,
		Name: commaJob.name, Command: commaJob.command}
	// in puts processes into the cgroup whose /proc/PID/cgroup is c
	in := func(c string, ps ...Process) []Process {
		for i := range ps {
			ps[i].Cgroup = c
		}
		return ps
	}
	vllmCtr, proxyCtr := containerID("demo/frank-vllm"), containerID("demo/proxy")
	pod, podCtr := "7c1e9b52-4d3a-4f0e-9a61-2b8d5e3f1c07", containerID("demo/erin-ddp")
	specs := []HostSpec{
		// alice's 8-GPU pretraining is Slurm job 7310
		{Name: "h100-a01", Capture: h100, State: "load", CPUs: 192, Load1: 24.3, MemTotalMiB: 2048 * 1024, MemUsedMiB: 1210 * 1024,
			Processes: in(slurmCgroup(7310), eight(401233, "alice", 71234, 3*day+1800, "/opt/conda/bin/python -u pretrain.py --nodes 4 --run alice-7b")...),
			Slurm:     []SlurmJob{{JobID: 7310, Partition: "h100", Account: "vision-lab", Name: "alice-7b-pretrain"}}},
		// idle but for idlemon's idle-time job, which fetch marks preemptible
		{Name: "h100-a02", Capture: h100, State: "idle", CPUs: 192, Load1: 8.12, MemTotalMiB: 2048 * 1024, MemUsedMiB: 41 * 1024,
			Processes: eight(30001, "idlejob", 6100, 5*3600, "python eval_sweep.py --queue nightly"),
			Idlemon:   `{"version": 1, "pid": 2999, "gpus": [], "jobs": [{"name": "process-evals", "gpus": [0,1,2,3,4,5,6,7], "pgid": 30000, "pids": [30000, 30001], "running": true}]}`},
		{Name: "h100-a03", Capture: h100, CPUs: 192, Load1: 9.8, MemTotalMiB: 2048 * 1024, MemUsedMiB: 530 * 1024,
			Processes: []Process{
				// bob's run is task 3 of his array job 7400 (its own job id 7403)
				in(slurmCgroup(7403), p(51200, "bob", 0, 40112, 7200, train))[0],
				p(51388, "carol", 1, 18220, 650, "julia --project=. --threads=8 simulate.jl"),
				p(51388, "carol", 2, 18104, 650, "julia --project=. --threads=8 simulate.jl"),
				p(52011, "dave", 5, 2296, 90, "/root/tools/memhog 2048"),
			},
			Slurm: []SlurmJob{{JobID: 7403, Display: "7400_3", Partition: "h100", Account: "nlp-lab", Name: "lr-sweep"}}},
		{Name: "h100-a04", Capture: h100, Failure: DriverNotLoaded, CPUs: 192, Load1: 0.4, MemTotalMiB: 2048 * 1024, MemUsedMiB: 12 * 1024},
		{Name: "h200-b01", Capture: h200, State: "load", CPUs: 224, Load1: 31.0, MemTotalMiB: 2048 * 1024, MemUsedMiB: 1700 * 1024,
			// frank's vLLM server runs in a Docker container: as root, as
			// docker runs it, so only the container's name says whose it is
			Processes: append(
				in(dockerCgroup(vllmCtr), p(70001, "root", 0, 120500, 12*day, vllm), p(70001, "root", 1, 120480, 12*day, vllm),
					p(70001, "root", 2, 120490, 12*day, vllm), p(70001, "root", 3, 120470, 12*day, vllm)),
				p(70442, "alice", 4, 98000, 2*day, train), p(70443, "alice", 5, 98000, 2*day, train),
				p(70444, "alice", 6, 98000, 2*day, train), p(70445, "alice", 7, 98000, 2*day, train)),
			ContainerEngine: "docker",
			Containers:      []Container{{ID: vllmCtr, Names: "frank-vllm-70b"}, {ID: proxyCtr, Names: "nginx-proxy,proxy"}},
			// alice's GPU 6 works on, degraded: reset it when idle
			Health: []GPUHealth{{GPU: 6, RemapPending: true, ECCUncorrected: 2, ClockEvents: ClockHWSlowdown}}},
		{Name: "h200-b02", Capture: h200, CPUs: 224, Load1: 6.1, MemTotalMiB: 2048 * 1024, MemUsedMiB: 300 * 1024,
			// GPU 0 is shared: bob's run computes, alice's notebook has
			// held 30 GB for a day and computes nothing
			Processes: []Process{
				func() Process { r := p(88001, "bob", 0, 64000, 3600, train); r.SMPct = 90; return r }(),
				func() Process {
					k := p(88050, "alice", 0, 30720, day+2*3600, "python3 -m ipykernel_launcher -f kernel-8d2e.json")
					k.Idle = true
					return k
				}(),
				comma,
				p(88310, "grace", 7, 28234, 300, "./gpu_burn 600"),
			},
			// GPU 6 logged a double bit error, then fell off the bus; the
			// driver asks for a reset until it has one
			Health: []GPUHealth{{GPU: 6, XIDs: []int{48, 79}, RecoveryAction: "Reset"}}},
		{Name: "h200-b03", Capture: h200, State: "idle", CPUs: 224, Load1: 0.05, MemTotalMiB: 2048 * 1024, MemUsedMiB: 20 * 1024,
			Health: []GPUHealth{{GPU: 5, RemapFailure: true}}},
		{Name: "h200-b04", Capture: h200, Failure: GPULost, CPUs: 224, Load1: 3.3, MemTotalMiB: 2048 * 1024, MemUsedMiB: 200 * 1024,
			Processes: []Process{
				p(90100, "heidi", 1, 50000, day, train),
				p(90200, "dave", 4, 77000, day, "/usr/local/bin/ollama serve"),
			}},
		{Name: "h200-b05", Capture: h200, Failure: Refuse},
		// nvidia-smi reports 7 GPUs, the driver lists 8, and no XID says why
		{Name: "h200-b06", Capture: h200, GPUs: 7, DriverOnlyGPUs: 1, CPUs: 224, Load1: 5.2, MemTotalMiB: 2048 * 1024, MemUsedMiB: 400 * 1024,
			Processes: []Process{p(93001, "carol", 2, 40000, 5*3600, "python train.py --config configs/vit-h.yaml")}},
		// judy's notebook kernel holds GPU 1 and computes nothing: idle-held;
		// the monitor account may not read the kernel log here
		{Name: "ws-c01", Capture: rtx, GPUs: 2, CPUs: 16, Load1: 2.7, MemTotalMiB: 64 * 1024, MemUsedMiB: 22 * 1024, KernelLog: KernelLogUnreadable,
			Processes: []Process{
				p(5267, "ivan", 0, 230, 420, "ffmpeg -hwaccel cuda -i input.mp4 -c:v h264_nvenc -b:v 8M out.mp4"),
				p(5268, "ivan", 0, 370, 415, "ffmpeg -hwaccel cuda -i talk.mkv -c:v hevc_nvenc talk.mp4"),
				func() Process {
					k := p(6001, "judy", 1, 5100, 3*day, "python3 -m ipykernel_launcher -f kernel-4f1c.json")
					k.Idle = true
					return k
				}(),
			}},
		{Name: "ws-c02", Capture: rtx, State: "idle", GPUs: 1, CPUs: 16, Load1: 0.31, MemTotalMiB: 64 * 1024, MemUsedMiB: 9 * 1024, KernelLog: KernelLogDmesg},
		// driver 465: no remapped_rows.*, clock reasons by their old name
		{Name: "ws-c03", Capture: old465, State: "idle", GPUs: 1, CPUs: 12, Load1: 0.12, MemTotalMiB: 32 * 1024, MemUsedMiB: 5 * 1024},
		{Name: "h100-a05", Capture: h100, CPUs: 192, Load1: 4.0, MemTotalMiB: 2048 * 1024, MemUsedMiB: 250 * 1024,
			// erin's run is a Kubernetes pod's
			Processes: append([]Process{p(61000, "carol", 3, 60000, 4*day, "python train.py --config configs/vit-h.yaml")},
				in(podCgroup(pod, podCtr),
					p(61500, "erin", 6, 9000, 1200, "python3 -m torch.distributed.run --nproc_per_node=2 pretrain.py"),
					p(61500, "erin", 7, 9000, 1200, "python3 -m torch.distributed.run --nproc_per_node=2 pretrain.py"))...)},
		// AMD nodes beside the NVIDIA ones: four MI100s (rocm-smi of ROCm
		// 6.0) with heidi's Slurm job on two and ivan's idle notebook on one
		{Name: "mi100-d01", AMD: "rocm-smi/mi100x4", CPUs: 128, Load1: 6.5, MemTotalMiB: 1024 * 1024, MemUsedMiB: 210 * 1024,
			Processes: append(in(slurmCgroup(7520), p(24011, "heidi", 0, 28100, 9*3600, train), p(24011, "heidi", 1, 27950, 9*3600, train)),
				func() Process {
					k := p(24380, "ivan", 3, 6100, 2*day, "python3 -m ipykernel_launcher -f kernel-77aa.json")
					k.Idle = true
					return k
				}()),
			Slurm: []SlurmJob{{JobID: 7520, Partition: "mi100", Account: "nlp-lab", Name: "heidi-rocm-bench"}}},
		// a Radeon workstation with amd-smi (ROCm 6)
		{Name: "ws-c05", AMD: "amd-smi/rx6600", CPUs: 16, Load1: 1.2, MemTotalMiB: 64 * 1024, MemUsedMiB: 20 * 1024,
			Processes: []Process{p(31002, "grace", 0, 6100, 3*3600, "/opt/conda/bin/python -u finetune.py --lr 3e-5 --epochs 3 --output /scratch/ft-run7")}},
		// a Radeon workstation on rocm-smi of ROCm 6.1
		{Name: "ws-c04", AMD: "rocm-smi/rx6700xt__rocm-6.1", CPUs: 16, Load1: 0.8, MemTotalMiB: 64 * 1024, MemUsedMiB: 14 * 1024,
			Processes: []Process{p(7702, "judy", 0, 3900, 1500, "python3 sd_webui.py --listen")}},
	}
	for i := range specs {
		specs[i].PmonDelay = time.Second // as a real pmon samples
	}
	return specs
}
