package holders

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// kfdTree is a fake KFD sysfs folder: topology nodes and process entries.
type kfdTree struct {
	t    testing.TB
	root string
}

func newKFDTree(t testing.TB, dir string) *kfdTree {
	t.Helper()
	k := &kfdTree{t: t, root: filepath.Join(dir, "kfd")}
	k.mkdir("proc")
	return k
}

func (k *kfdTree) mkdir(rel string) string {
	k.t.Helper()
	p := filepath.Join(k.root, rel)
	if err := os.MkdirAll(p, 0o755); err != nil {
		k.t.Fatal(err)
	}
	return p
}

func (k *kfdTree) write(rel, body string) {
	k.t.Helper()
	if err := os.WriteFile(filepath.Join(k.root, rel), []byte(body), 0o644); err != nil {
		k.t.Fatal(err)
	}
}

// node writes topology node n: a CPU when gpuID is 0, else a GPU with
// render minor and PCI location.
func (k *kfdTree) node(n int, gpuID uint32, minor int, location int) {
	k.t.Helper()
	rel := filepath.Join("topology", "nodes", strconv.Itoa(n))
	k.mkdir(rel)
	k.write(filepath.Join(rel, "gpu_id"), strconv.FormatUint(uint64(gpuID), 10)+"\n")
	props := "cpu_cores_count 0\nsimd_count 304\n"
	if gpuID == 0 {
		props = "cpu_cores_count 64\nsimd_count 0\ndrm_render_minor 0\n"
	} else {
		props += "drm_render_minor " + strconv.Itoa(minor) + "\nlocation_id " + strconv.Itoa(location) + "\ndomain 0\n"
	}
	k.write(filepath.Join(rel, "properties"), props)
}

// entry writes the KFD entry of pid: vram is gpu_id -> the vram file's text.
func (k *kfdTree) entry(pid int, vram map[uint32]string) {
	k.t.Helper()
	rel := filepath.Join("proc", strconv.Itoa(pid))
	k.mkdir(rel)
	k.write(filepath.Join(rel, "pasid"), "32770\n")
	for id, v := range vram {
		k.write(filepath.Join(rel, "vram_"+strconv.FormatUint(uint64(id), 10)), v)
		k.write(filepath.Join(rel, "sdma_"+strconv.FormatUint(uint64(id), 10)), "0\n")
	}
}

// The decision alone: which GPUs a scan says each process holds.
func TestAMDHolders(t *testing.T) {
	all := []int{0, 1, 2}
	vram := func(v ...gpuVRAM) []gpuVRAM { return v }
	tests := []struct {
		name    string
		uses    map[int]*kfdUse
		parents map[int]int
		want    map[int][]int
	}{
		{"graphics: render nodes only", map[int]*kfdUse{10: {render: []int{1}}}, nil,
			map[int][]int{1: {10}}},
		{"compute: VRAM on gpu 2, render nodes of all ignored",
			map[int]*kfdUse{10: {kfd: true, entry: true, render: all, vram: vram(gpuVRAM{0, 0, true}, gpuVRAM{1, 0, true}, gpuVRAM{2, 4096, true})}}, nil,
			map[int][]int{2: {10}}},
		{"just opened: entry with no VRAM holds every GPU it lists",
			map[int]*kfdUse{10: {kfd: true, entry: true, vram: vram(gpuVRAM{0, 0, true}, gpuVRAM{2, 0, true})}}, nil,
			map[int][]int{0: {10}, 2: {10}}},
		{"entry listing no known GPU holds every GPU",
			map[int]*kfdUse{10: {kfd: true, entry: true}}, nil,
			map[int][]int{0: {10}, 1: {10}, 2: {10}}},
		{"unreadable VRAM counts as held",
			map[int]*kfdUse{10: {kfd: true, entry: true, vram: vram(gpuVRAM{0, 0, true}, gpuVRAM{1, 0, false}, gpuVRAM{2, 0, true})}}, nil,
			map[int][]int{1: {10}}},
		{"2^64-1 bytes is VRAM",
			map[int]*kfdUse{10: {kfd: true, entry: true, vram: vram(gpuVRAM{0, 1<<64 - 1, true})}}, nil,
			map[int][]int{0: {10}}},
		{"a gpu listed twice counts once",
			map[int]*kfdUse{10: {kfd: true, entry: true, vram: vram(gpuVRAM{1, 5, true}, gpuVRAM{1, 5, true})}}, nil,
			map[int][]int{1: {10}}},
		{"no entry, no opener above: every GPU",
			map[int]*kfdUse{10: {kfd: true, render: []int{0}}}, map[int]int{10: 1},
			map[int][]int{0: {10}, 1: {10}, 2: {10}}},
		{"forked workers of an opener hold nothing of their own",
			map[int]*kfdUse{
				10: {kfd: true, entry: true, vram: vram(gpuVRAM{1, 1 << 30, true})},
				11: {kfd: true, render: all},
				12: {kfd: true},
			}, map[int]int{10: 1, 11: 10, 12: 20, 20: 11},
			map[int][]int{1: {10}}},
		{"a worker whose opener is gone holds every GPU",
			map[int]*kfdUse{11: {kfd: true}}, map[int]int{11: 1},
			map[int][]int{0: {11}, 1: {11}, 2: {11}}},
		{"a parent loop ends",
			map[int]*kfdUse{11: {kfd: true}, 12: {render: []int{2}}}, map[int]int{11: 12, 12: 11},
			map[int][]int{0: {11}, 1: {11}, 2: {11, 12}}},
		{"several processes, sorted",
			map[int]*kfdUse{
				30: {kfd: true, entry: true, vram: vram(gpuVRAM{0, 1, true})},
				20: {render: []int{0}},
				10: {kfd: true, entry: true, vram: vram(gpuVRAM{0, 7, true}, gpuVRAM{1, 7, true})},
			}, nil,
			map[int][]int{0: {10, 20, 30}, 1: {10}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := amdHolders(tt.uses, all, func(pid int) int { return tt.parents[pid] })
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("holders (-want +got):\n%s", diff)
			}
		})
	}
}

// readTopology numbers the GPUs as ROCm does: node order (numeric), CPU
// nodes left out.
func TestReadTopology(t *testing.T) {
	k := newKFDTree(t, t.TempDir())
	k.node(0, 0, 0, 0)
	k.node(1, 0, 0, 0)
	k.node(2, 51234, 129, 0xc100)
	k.node(10, 777, 130, 0x0300|1<<3|1)
	k.write("topology/nodes/README", "not a node")
	got, err := readTopology(k.root)
	if err != nil {
		t.Fatal(err)
	}
	want := []AMDGPU{
		{Index: 0, Node: 2, GPUID: 51234, RenderMinor: 129, BusID: "0000:c1:00.0"},
		{Index: 1, Node: 10, GPUID: 777, RenderMinor: 130, BusID: "0000:03:01.1"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("gpus (-want +got):\n%s", diff)
	}
}

// A topology that is not the kernel's is an error that says where, never a
// GPU list with holes (the indices after it would be wrong).
func TestReadTopologyBad(t *testing.T) {
	tests := []struct {
		name  string
		spoil func(k *kfdTree)
		want  string
	}{
		{"garbage gpu_id", func(k *kfdTree) { k.write("topology/nodes/1/gpu_id", "<b>x</b>\n") }, `gpu_id: "<b>x</b>" is not a gpu id`},
		{"gpu_id above 32 bits", func(k *kfdTree) { k.write("topology/nodes/1/gpu_id", "4294967296\n") }, "is not a gpu id"},
		{"negative gpu_id", func(k *kfdTree) { k.write("topology/nodes/1/gpu_id", "-5\n") }, "is not a gpu id"},
		{"huge gpu_id file", func(k *kfdTree) { k.write("topology/nodes/1/gpu_id", strings.Repeat("9", 1<<20)) }, "more than 32 bytes"},
		{"missing gpu_id", func(k *kfdTree) { os.Remove(filepath.Join(k.root, "topology/nodes/1/gpu_id")) }, "no such file"},
		{"missing properties", func(k *kfdTree) { os.Remove(filepath.Join(k.root, "topology/nodes/1/properties")) }, "no such file"},
		{"huge properties", func(k *kfdTree) { k.write("topology/nodes/1/properties", strings.Repeat("x 1\n", 1<<15)) }, "more than 65536 bytes"},
		{"no render minor", func(k *kfdTree) { k.write("topology/nodes/1/properties", "drm_render_minor lots\n") }, "no drm_render_minor"},
		{"no topology", func(k *kfdTree) { os.RemoveAll(filepath.Join(k.root, "topology")) }, "no such file"},
		{"a gpu_id twice", func(k *kfdTree) { k.node(2, 4242, 129, 0) }, "nodes 1 and 2 name the same GPU"},
		{"a render minor twice", func(k *kfdTree) { k.node(2, 4343, 128, 0) }, "nodes 1 and 2 name the same GPU"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newKFDTree(t, t.TempDir())
			k.node(0, 0, 0, 0)
			k.node(1, 4242, 128, 0)
			tt.spoil(k)
			_, err := readTopology(k.root)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one with %q", err, tt.want)
			}
		})
	}
	k := newKFDTree(t, t.TempDir())
	for n := 0; n <= maxKFDNodes; n++ {
		k.mkdir(filepath.Join("topology", "nodes", strconv.Itoa(n)))
	}
	if _, err := readTopology(k.root); err == nil || !strings.Contains(err.Error(), "more than 1024 nodes") {
		t.Errorf("too many nodes: err = %v", err)
	}
}

// FindAMD maps render nodes to GPUs by the topology's render minors;
// another vendor's render node is not a GPU of this host.
func TestFindAMD(t *testing.T) {
	dir := t.TempDir()
	k := newKFDTree(t, dir)
	k.node(0, 0, 0, 0)
	k.node(1, 100, 129, 0)
	k.node(2, 200, 128, 0)
	k.node(3, 300, 131, 0) // no render node file
	dri := filepath.Join(dir, "dri")
	os.Mkdir(dri, 0o755)
	for _, n := range []string{"renderD128", "renderD129", "renderD130", "card0"} {
		os.WriteFile(filepath.Join(dri, n), nil, 0o644)
	}
	kfd := filepath.Join(dir, "kfd-dev")
	os.WriteFile(kfd, nil, 0o644)
	h, err := FindAMD(kfd, filepath.Join(dri, "renderD*"), k.root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range h.Devices() {
		got = append(got, strconv.Itoa(d.Index)+"="+filepath.Base(d.Path))
	}
	if diff := cmp.Diff([]string{"-1=kfd-dev", "0=renderD129", "1=renderD128"}, got); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
	if len(h.GPUs) != 3 || h.GPUs[2].GPUID != 300 {
		t.Errorf("gpus: %+v", h.GPUs)
	}
	if _, err := FindAMD(filepath.Join(dir, "nokfd"), filepath.Join(dri, "renderD*"), k.root); err == nil {
		t.Error("no /dev/kfd: no error")
	}
}

// A scan of a fake host: /proc links to plain files standing for /dev/kfd
// and the render nodes, and a KFD tree with garbage in it. Nothing read
// crashes the scan or makes a process hold less than it may.
func TestScanAMD(t *testing.T) {
	dir := t.TempDir()
	k := newKFDTree(t, dir)
	k.node(0, 0, 0, 0)
	k.node(1, 100, 128, 0)
	k.node(2, 200, 129, 0)
	kfd, r0, r1 := filepath.Join(dir, "kfd-dev"), filepath.Join(dir, "renderD128"), filepath.Join(dir, "renderD129")
	other := filepath.Join(dir, "other")
	for _, n := range []string{kfd, r0, r1, other} {
		os.WriteFile(n, nil, 0o644)
	}
	h, err := FindAMD(kfd, filepath.Join(dir, "renderD*"), k.root)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeProc{t: t, root: filepath.Join(dir, "proc")}
	f.add(1, 0, 1, 1, 'S', other)
	f.add(100, 1, 100, 100, 'S', kfd, r0, r1) // trains on gpu 1
	k.entry(100, map[uint32]string{100: "0\n", 200: "1073741824\n"})
	f.add(101, 100, 100, 100, 'S', kfd, r0, r1) // its forked worker
	f.add(200, 1, 200, 200, 'S', r0)            // a desktop on gpu 0
	f.add(300, 1, 300, 300, 'S', kfd)           // has just opened /dev/kfd
	k.entry(300, map[uint32]string{100: "0\n", 200: "0\n"})
	f.add(400, 1, 400, 400, 'S', kfd) // garbage, 2^64, negative: held
	k.entry(400, map[uint32]string{100: "lots\n", 200: "0\n"})
	f.add(401, 1, 401, 401, 'S', kfd)
	k.entry(401, map[uint32]string{100: "18446744073709551616\n", 200: "0\n"})
	f.add(402, 1, 402, 402, 'S', kfd)
	k.entry(402, map[uint32]string{100: "0\n", 200: "-4096\n"})
	f.add(403, 1, 403, 403, 'S', kfd) // a huge vram file
	k.entry(403, map[uint32]string{100: strings.Repeat("1", 1<<20), 200: "0\n"})
	f.add(404, 1, 404, 404, 'S', kfd) // VRAM on a GPU idlemon does not know only
	k.entry(404, map[uint32]string{999: "4096\n"})
	f.add(500, 1, 500, 500, 'S', kfd) // its entry is a file, not a folder
	k.write("proc/500", "x")
	f.add(501, 1, 501, 501, 'S', kfd) // an entry with too many names
	k.entry(501, map[uint32]string{200: "4096\n"})
	for i := 0; i < maxKFDEntries; i++ {
		k.write("proc/501/junk"+strconv.Itoa(i), "")
	}
	f.add(600, 1, 600, 600, 'S', kfd) // vanished: no stat line
	os.Remove(filepath.Join(f.root, "600", "stat"))

	s := NewAMDScanner(h)
	s.Root = f.root
	snap, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][]int{
		0: {200, 300, 400, 401, 403, 404, 500, 501},
		1: {100, 300, 402, 404, 500, 501},
	}
	if diff := cmp.Diff(want, snap.Holders); diff != "" {
		t.Errorf("holders (-want +got):\n%s", diff)
	}
}

// The vram files: a number of bytes and a newline; anything else is not
// read as a number.
func TestReadVRAM(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		body string
		want uint64
		ok   bool
	}{
		{"0\n", 0, true},
		{"1073741824\n", 1 << 30, true},
		{"1073741824", 1 << 30, true},
		{"18446744073709551615\n", 0, false}, // 20 digits: more than atou reads
		{"-1\n", 0, false},
		{"", 0, false},
		{"12 KiB\n", 0, false},
		{strings.Repeat("9", 40), 0, false},
	}
	fd, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	for i, tt := range tests {
		name := "vram_" + strconv.Itoa(i)
		os.WriteFile(filepath.Join(dir, name), []byte(tt.body), 0o644)
		got, ok := readVRAM(int(fd.Fd()), []byte(name))
		if got != tt.want || ok != tt.ok {
			t.Errorf("%q: %d %v, want %d %v", tt.body, got, ok, tt.want, tt.ok)
		}
	}
	if _, ok := readVRAM(int(fd.Fd()), []byte("missing")); ok {
		t.Error("a missing file read")
	}
}
