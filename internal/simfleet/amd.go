package simfleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/gpumon/gpumon/internal/captures"
	"github.com/gpumon/gpumon/internal/kernlog"
	"github.com/gpumon/gpumon/internal/probe"
	"github.com/gpumon/gpumon/internal/rocm"
)

// amdModel is one AMD capture, as a simulated AMD host answers from it:
// its tool's own JSON, whole, and the PCI addresses of its GPUs, in the
// tool's index order, which the host's KFD folder lists (made up where
// the capture gives none).
type amdModel struct {
	capture captures.AMDCapture
	busIDs  []string
}

var (
	amdMu    sync.Mutex
	amdCache = map[string]*amdModel{}
)

// resolveAMD reads HostSpec.AMD: "amd-smi/" or "rocm-smi/", then a
// capture's full name or a substring matching exactly one of that tool's.
func resolveAMD(spec string) (*amdModel, error) {
	tool, name, ok := strings.Cut(spec, "/")
	if !ok || (tool != captures.AMDSMI && tool != captures.ROCmSMI) {
		return nil, fmt.Errorf("AMD capture %q: want amd-smi/NAME or rocm-smi/NAME", spec)
	}
	names := captures.AMDNames(tool)
	var found []string
	for _, n := range names {
		if n == name {
			found = []string{n}
			break
		}
		if strings.Contains(n, name) {
			found = append(found, n)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("AMD capture %q: %d of %s's captures match (have %s)", spec, len(found), tool, strings.Join(names, ", "))
	}
	amdMu.Lock()
	defer amdMu.Unlock()
	key := tool + "/" + found[0]
	if m, ok := amdCache[key]; ok {
		return m, nil
	}
	c, err := captures.LoadAMD(tool, found[0])
	if err != nil {
		return nil, err
	}
	var rep rocm.Report
	if tool == captures.AMDSMI {
		rep, err = rocm.ParseAMDSMI(c.Static, c.Metric)
	} else {
		rep, err = rocm.ParseROCmSMI(c.Out)
	}
	if err != nil {
		return nil, fmt.Errorf("AMD capture %s: %v", key, err)
	}
	m := &amdModel{capture: c}
	for i, g := range rep.GPUs {
		id, ok := kernlog.CanonicalBusID(g.BusID)
		if !ok {
			// the tool gave none (some amd-smi and rocm-smi shapes
			// do not): the host's KFD folder still has one
			id = fmt.Sprintf("0000:%02x:00.0", (0x11+0x10*i)&0xff)
		}
		m.busIDs = append(m.busIDs, id)
	}
	if len(m.busIDs) == 0 {
		return nil, fmt.Errorf("AMD capture %s lists no GPU", key)
	}
	amdCache[key] = m
	return m, nil
}

// amdBusIDs are the PCI addresses of an AMD host's n GPUs: the
// capture's, then, for the copies past them, addresses in domain 1 that
// no capture uses.
func amdBusIDs(m *amdModel, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		if i < len(m.busIDs) {
			ids[i] = m.busIDs[i]
		} else {
			ids[i] = fmt.Sprintf("0001:%02x:00.0", i)
		}
	}
	return ids
}

// amdFailures are the failures an AMD host can show: those of its
// connection, not of nvidia-smi.
func amdFailure(f Failure) bool {
	switch f {
	case HangNvidiaSMI, DropMidOutput, DriverNotLoaded, NoDevices, GPULost:
		return false
	}
	return true
}

// kfdGPUID is the gpu_id the KFD folder gives GPU i: any number, stable.
func kfdGPUID(i int) int { return 41000 + 17*i }

// renderKFD is the probe's kfd section for the host's processes: a node
// line per GPU, then each process's VRAM on each GPU it uses (the probe
// leaves out the entries of 0 a ROCm process has on the other GPUs).
func (h *host) renderKFD() []byte {
	var b bytes.Buffer
	for i, bus := range h.amdBus {
		var dom, bn, dev, fn int
		fmt.Sscanf(bus, "%x:%x:%x.%x", &dom, &bn, &dev, &fn)
		fmt.Fprintf(&b, "node %d %d %d\n", kfdGPUID(i), dom, bn<<8|dev<<3|fn)
	}
	type entry struct{ pid, gpu int }
	vram := map[entry]int64{}
	var order []entry
	for _, p := range h.spec.Processes {
		e := entry{p.PID, p.GPU}
		if _, seen := vram[e]; !seen {
			order = append(order, e)
		}
		vram[e] += int64(p.MemMiB) << 20
	}
	for _, e := range order {
		if vram[e] > 0 {
			fmt.Fprintf(&b, "proc %d %d %d\n", e.pid, kfdGPUID(e.gpu), vram[e])
		}
	}
	return b.Bytes()
}

// pidList is the host's processes as the lines renderPS and renderAttrib
// pick pids from ("PID," a line).
func (h *host) pidList() []byte {
	var b []byte
	for _, p := range h.spec.Processes {
		b = strconv.AppendInt(b, int64(p.PID), 10)
		b = append(b, ",\n"...)
	}
	return b
}

// answerAMD writes what the probe prints on an AMD host: which tools it
// has, their answers (the captures, whole, as a tool too old for the
// probe's options prints them), the KFD folder, and ps and attribution
// for its processes.
func (h *host) answerAMD(w probe.Writer, req probe.Request) {
	c := h.amd.capture
	tools := "rocm-smi /opt/rocm/bin/rocm-smi\n"
	if c.Tool == captures.AMDSMI {
		tools = "amd-smi /opt/rocm/bin/amd-smi\n"
	}
	if c.ROCm != "" {
		tools += "rocm_version " + c.ROCm + "\n"
	}
	_ = w.Section(probe.SectionTools, []byte(tools), 0)
	if c.Tool == captures.AMDSMI {
		_ = w.Section(probe.SectionAMDSMIStatic, h.amdStatic, 0)
		_ = w.Section(probe.SectionAMDSMIMetric, h.amdMetric, 0)
	} else {
		_ = w.Section(probe.SectionROCmSMI, h.rocmSMI, 0)
	}
	_ = w.Section(probe.SectionKFD, h.kfd, 0)
	if ps, ok := h.renderPS(h.pidList()); ok {
		_ = w.Section(probe.SectionPS, ps.body, ps.code)
		h.writeAttrib(w, req, h.renderAttrib(h.pidList()))
	}
	_ = w.Section(probe.SectionHost, h.hostBody, 0)
	if req.StateFile != "" && h.spec.Idlemon != "" {
		_ = w.Section(probe.SectionIdlemon, []byte(h.spec.Idlemon), 0)
	}
	_ = w.Done()
}

// amdCaptures are the AMD captures a simulated host answers from in full,
// as HostSpec.AMD names them: amd-smi's with both answers, then
// rocm-smi's. (A static-only capture makes a host whose readings are
// unknown, and says so: fine when asked for, not in a generated fleet.)
func amdCaptures() []string {
	var out []string
	for _, tool := range []string{captures.AMDSMI, captures.ROCmSMI} {
		for _, n := range captures.AMDNames(tool) {
			m, err := resolveAMD(tool + "/" + n)
			if err == nil && (tool == captures.ROCmSMI || m.capture.Metric != nil) {
				out = append(out, tool+"/"+n)
			}
		}
	}
	return out
}

// GenerateAMD is Generate's fleet on AMD hosts, cycling through the AMD
// captures: each host has 8 GPUs as Generate's do (its capture's,
// repeated), their processes, users, Slurm jobs and containers, and no
// NVIDIA health (no driver_gpus, XIDs or pmon: nvidia-smi's).
func GenerateAMD(n int, seed int64) []HostSpec {
	specs := Generate(n, seed)
	caps := amdCaptures()
	if len(caps) == 0 {
		return specs
	}
	for i := range specs {
		specs[i].AMD = caps[i%len(caps)]
		specs[i].Health = nil
	}
	return specs
}

// busyUtil is the utilization a simulated AMD GPU reports while a process
// computes on it (the captures are of idle GPUs).
const busyUtil = 87

// gpuLoad is what an AMD host's processes put on GPU i: VRAM in MiB, and
// whether one of them computes.
func (h *host) gpuLoad(i int) (mib int, computing bool) {
	for _, p := range h.procsByGPU[i] {
		mib += p.MemMiB
		computing = computing || !p.Idle
	}
	return mib, computing
}

// loadedAnswers are the capture's answers for this host: its GPUs (the
// capture's, repeated where the host has more, each copy with an index
// and PCI address of its own), and its load in them: the GPUs its
// processes use report their VRAM and, where one computes, busyUtil. The
// JSON is rewritten (keys sorted, as Go writes it), which the parsers,
// reading by meaning, do not mind; a capture whose shape this does not
// know is sent as it is.
func (h *host) loadedAnswers() (static, metric, out []byte) {
	c := h.amd.capture
	if c.Tool == captures.ROCmSMI {
		return nil, nil, unindent(h.loadROCmSMI(c.Out))
	}
	return unindent(h.loadAMDSMI(c.Static, probe.AMDSMIStaticArgs, false)),
		unindent(h.loadAMDSMI(c.Metric, probe.AMDSMIMetricArgs, true)), nil
}

// unindent is what the probe's unindent (sed) makes of a tool's answer:
// each line without its leading blanks.
func unindent(answer []byte) []byte {
	if answer == nil {
		return nil
	}
	lines := bytes.Split(answer, []byte("\n"))
	for i, l := range lines {
		lines[i] = bytes.TrimLeft(l, " \t")
	}
	return bytes.Join(lines, []byte("\n"))
}

// asked is the sections of an amd-smi answer that options ask for, as it
// names them: --mem-usage prints "mem_usage".
func asked(options []string) map[string]bool {
	keys := map[string]bool{"gpu": true}
	for _, o := range options {
		keys[strings.ReplaceAll(strings.TrimPrefix(o, "--"), "-", "_")] = true
	}
	return keys
}

// copyJSON is a deep copy of a decoded JSON value.
func copyJSON(v any) any {
	b, _ := json.Marshal(v)
	var c any
	_ = json.Unmarshal(b, &c)
	return c
}

func (h *host) loadROCmSMI(out []byte) []byte {
	var cards map[string]any
	if json.Unmarshal(out, &cards) != nil {
		return out
	}
	k := 0
	for cards["card"+strconv.Itoa(k)] != nil {
		k++
	}
	if k == 0 {
		return out
	}
	for i := min(k, h.spec.GPUs); i < h.spec.GPUs || cards["card"+strconv.Itoa(i)] != nil; i++ {
		if i >= h.spec.GPUs {
			delete(cards, "card"+strconv.Itoa(i))
			continue
		}
		c, _ := copyJSON(cards["card"+strconv.Itoa(i%k)]).(map[string]any)
		for key := range c {
			if strings.EqualFold(key, "PCI Bus") {
				c[key] = h.amdBus[i]
			}
		}
		cards["card"+strconv.Itoa(i)] = c
	}
	for i := range h.procsByGPU {
		card, _ := cards["card"+strconv.Itoa(i)].(map[string]any)
		mib, computing := h.gpuLoad(i)
		if card == nil || mib == 0 {
			continue
		}
		for key := range card {
			switch {
			case strings.HasPrefix(key, "GPU use (%)") && computing:
				card[key] = strconv.Itoa(busyUtil)
			case key == "VRAM Total Used Memory (B)":
				card[key] = strconv.FormatInt(int64(mib)<<20, 10)
			}
		}
	}
	b, err := json.MarshalIndent(cards, "", "")
	if err != nil {
		return out
	}
	return b
}

// loadAMDSMI is amd-smi's static or metric answer for this host, as the
// probe's options ask it (amd-smi then prints those sections only): a
// top level list of GPUs, or one under "gpu_data".
func (h *host) loadAMDSMI(answer []byte, options []string, metric bool) []byte {
	var v any
	if len(answer) == 0 || json.Unmarshal(answer, &v) != nil {
		return answer
	}
	var gpus []any
	wrapper, _ := v.(map[string]any)
	switch t := v.(type) {
	case []any:
		gpus = t
	case map[string]any:
		gpus, _ = t["gpu_data"].([]any)
	}
	if len(gpus) == 0 {
		return answer
	}
	keep := asked(options)
	widened := make([]any, h.spec.GPUs)
	for i := range widened {
		g := copyJSON(gpus[i%len(gpus)])
		if obj, ok := g.(map[string]any); ok {
			if bus, ok := obj["bus"].(map[string]any); ok && bus["bdf"] != nil && i >= len(gpus) {
				bus["bdf"] = h.amdBus[i]
			}
			obj["gpu"] = i
			for k := range obj {
				if !keep[k] {
					delete(obj, k)
				}
			}
		}
		widened[i] = g
	}
	for i, g := range widened {
		obj, _ := g.(map[string]any)
		mib, computing := h.gpuLoad(i)
		if !metric || obj == nil || mib == 0 {
			continue
		}
		if computing {
			setReading(obj, "usage", "gfx_activity", busyUtil)
		}
		setReading(obj, "mem_usage", "used_vram", mib)
	}
	if wrapper != nil {
		wrapper["gpu_data"] = widened
		v = wrapper
	} else {
		v = widened
	}
	b, err := json.MarshalIndent(v, "", "")
	if err != nil {
		return answer
	}
	return b
}

// setReading sets obj[group][key] to n, where it is there: as a bare
// number, or as the value of a {"value", "unit"} object.
func setReading(obj map[string]any, group, key string, n int) {
	m, _ := obj[group].(map[string]any)
	switch r := m[key].(type) {
	case float64:
		m[key] = n
	case map[string]any:
		if _, ok := r["value"]; ok {
			r["value"] = n
		}
	}
}
