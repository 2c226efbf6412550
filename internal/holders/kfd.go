package holders

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// AMD's device files and the KFD driver's sysfs folder, where nothing else
// is said.
const (
	DefaultKFDDevice  = "/dev/kfd"
	DefaultRenderGlob = "/dev/dri/renderD*"
	DefaultKFDSysfs   = "/sys/class/kfd/kfd"
)

// kfdIndex marks /dev/kfd among a Scanner's devices: it is every GPU's.
const kfdIndex = -1

// Bounds on what is read from a KFD folder: the kernel's own files are
// far smaller, and a tree that is not the kernel's must not make a scan
// grow or stall.
const (
	maxKFDNodes   = 1024    // topology nodes
	maxKFDEntries = 1024    // names in one proc/PID folder (4 or so per GPU)
	maxProperties = 1 << 16 // bytes of a node's properties file
	maxNumberFile = 32      // bytes of a gpu_id or vram_GPUID file
)

// AMDGPU is one GPU of the KFD topology.
type AMDGPU struct {
	Index       int    // ROCm's index: its place among the nodes with a GPU, what ROCR_VISIBLE_DEVICES counts
	Node        int    // topology node number
	GPUID       uint32 // KFD's gpu_id: the suffix of proc/PID/vram_GPUID
	RenderMinor int    // drm_render_minor: /dev/dri/renderD<minor>
	BusID       string // "0000:c1:00.0", from domain and location_id
}

// AMDHost is an AMD host's GPUs as the KFD topology lists them, and the
// device files that tell who uses them: /dev/kfd, which every ROCm process
// opens whatever GPU it uses, and the GPUs' render nodes.
type AMDHost struct {
	Sysfs  string   // the KFD folder, /sys/class/kfd/kfd
	KFD    Device   // Index is kfdIndex
	GPUs   []AMDGPU // by Index
	Render []Device // the render nodes found, Index = the GPU's
}

// Devices lists every device file of h: /dev/kfd, then the render nodes.
func (h *AMDHost) Devices() []Device {
	return append([]Device{h.KFD}, h.Render...)
}

// FindAMD reads the KFD topology under sysfs and finds kfd and the GPUs'
// render nodes among the files renderGlob matches (a render node the
// topology does not name, another vendor's, is left out). A GPU whose
// render node is not found is still a GPU: /dev/kfd tells its users.
func FindAMD(kfd, renderGlob, sysfs string) (*AMDHost, error) {
	gpus, err := readTopology(sysfs)
	if err != nil {
		return nil, err
	}
	if len(gpus) == 0 {
		return nil, fmt.Errorf("%s/topology lists no GPU", sysfs)
	}
	h := &AMDHost{Sysfs: sysfs, GPUs: gpus}
	if h.KFD, err = statDevice(kfd); err != nil {
		return nil, err
	}
	h.KFD.Index = kfdIndex
	names, err := filepath.Glob(renderGlob)
	if err != nil {
		return nil, err
	}
	byMinor := map[int]int{}
	for _, g := range gpus {
		byMinor[g.RenderMinor] = g.Index
	}
	for _, name := range names {
		minor, ok := atoi([]byte(trailingNumber.FindString(filepath.Base(name))))
		idx, known := byMinor[minor]
		if !ok || !known || minor <= 0 {
			continue
		}
		d, err := statDevice(name)
		if err != nil {
			return nil, err
		}
		d.Index = idx
		h.Render = append(h.Render, d)
	}
	sort.Slice(h.Render, func(i, j int) bool { return h.Render[i].Index < h.Render[j].Index })
	return h, nil
}

// readTopology lists the GPUs of the KFD topology under sysfs
// (topology/nodes/N/gpu_id and properties), numbered as ROCm numbers them:
// in node order, counting only the nodes with a GPU (gpu_id not 0; a CPU
// node has 0). A node that cannot be read is an error, not a GPU left
// out: every later GPU's index would be wrong.
func readTopology(sysfs string) ([]AMDGPU, error) {
	dir := filepath.Join(sysfs, "topology", "nodes")
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	names, err := f.Readdirnames(maxKFDNodes + 1)
	f.Close()
	if err != nil {
		return nil, err
	}
	if len(names) > maxKFDNodes {
		return nil, fmt.Errorf("%s: more than %d nodes", dir, maxKFDNodes)
	}
	var nodes []int
	for _, n := range names {
		if v, ok := atoi([]byte(n)); ok && v >= 0 {
			nodes = append(nodes, v)
		}
	}
	sort.Ints(nodes)
	var gpus []AMDGPU
	for _, n := range nodes {
		g, err := readNode(filepath.Join(dir, strconv.Itoa(n)))
		if err != nil {
			return nil, err
		}
		if g.GPUID == 0 {
			continue // a CPU
		}
		for _, o := range gpus {
			if o.GPUID == g.GPUID || (o.RenderMinor == g.RenderMinor && g.RenderMinor != 0) {
				return nil, fmt.Errorf("%s: nodes %d and %d name the same GPU (gpu_id or drm_render_minor)", dir, o.Node, n)
			}
		}
		g.Node, g.Index = n, len(gpus)
		gpus = append(gpus, g)
	}
	return gpus, nil
}

// readNode reads one topology node's gpu_id and the properties idlemon
// uses.
func readNode(dir string) (AMDGPU, error) {
	var g AMDGPU
	b, err := readBounded(filepath.Join(dir, "gpu_id"), maxNumberFile)
	if err != nil {
		return g, err
	}
	id, ok := atou(bytes.TrimSpace(b))
	if !ok || id > 1<<32-1 {
		return g, fmt.Errorf("%s/gpu_id: %q is not a gpu id", dir, clip(b))
	}
	g.GPUID = uint32(id)
	if g.GPUID == 0 {
		return g, nil
	}
	b, err = readBounded(filepath.Join(dir, "properties"), maxProperties)
	if err != nil {
		return g, err
	}
	props := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
		if n, ok := atou([]byte(strings.TrimSpace(v))); ok {
			props[k] = n
		}
	}
	minor, ok := props["drm_render_minor"]
	if !ok || minor > 1<<20 {
		return g, fmt.Errorf("%s/properties: no drm_render_minor", dir)
	}
	g.RenderMinor = int(minor)
	if loc, ok := props["location_id"]; ok {
		g.BusID = fmt.Sprintf("%04x:%02x:%02x.%x", props["domain"]&0xffff, loc>>8&0xff, loc>>3&0x1f, loc&7)
	}
	return g, nil
}

// readBounded reads a small file whole, or fails when it has more than
// max bytes.
func readBounded(path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, max+1)
	n := 0
	for n < len(b) {
		m, err := f.Read(b[n:])
		n += m
		if err != nil || m == 0 {
			break
		}
	}
	if n > max {
		return nil, fmt.Errorf("%s: more than %d bytes", path, max)
	}
	return b[:n], nil
}

// clip cuts b for a message (which quotes it with %q).
func clip(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 20 {
		b = b[:20]
	}
	return string(b)
}

// kfdState is what a Scanner of an AMD host needs besides the device
// files.
type kfdState struct {
	sysfs   string
	gpuOf   map[uint32]int // gpu_id -> GPU index
	all     []int          // every GPU index
	holders []int          // pids holding /dev/kfd, this scan
}

// NewAMDScanner returns a scanner for h's device files that tells which
// GPUs a ROCm process really uses from its KFD entry (see amdHolders).
func NewAMDScanner(h *AMDHost) *Scanner {
	s := NewScanner(h.Devices())
	k := &kfdState{sysfs: h.Sysfs, gpuOf: map[uint32]int{}}
	for _, g := range h.GPUs {
		k.gpuOf[g.GPUID] = g.Index
		k.all = append(k.all, g.Index)
	}
	s.kfd = k
	return s
}

// applyKFD replaces the holders the fd scan found on an AMD host with what
// amdHolders decides from each process's KFD entry.
func (s *Scanner) applyKFD(dfd int, snap *Snapshot) {
	k := s.kfd
	uses := map[int]*kfdUse{}
	use := func(pid int) *kfdUse {
		u := uses[pid]
		if u == nil {
			u = &kfdUse{}
			uses[pid] = u
		}
		return u
	}
	for gpu, pids := range snap.Holders {
		for _, pid := range pids {
			use(pid).render = append(use(pid).render, gpu)
		}
	}
	for _, pid := range k.holders {
		u := use(pid)
		u.kfd = true
		u.entry, u.vram = s.readEntry(pid)
	}
	parents := map[int]int{}
	parent := func(pid int) int {
		if pp, ok := parents[pid]; ok {
			return pp
		}
		pp := 0
		if p, err := s.readStat(dfd, pid, false); err == nil {
			pp = p.PPID
		}
		parents[pid] = pp
		return pp
	}
	snap.Holders = amdHolders(uses, k.all, parent)
}

// readEntry reads the KFD entry of pid, sysfs/proc/PID: whether there is
// one, and its vram_GPUID files of the GPUs known. A value that cannot be
// read or parsed has ok false (and counts as VRAM held). Only a folder
// that is not there is no entry; one that cannot be listed, or has more
// names than any entry of the kernel's, reads as an entry that lists no
// GPU (held: every GPU).
func (s *Scanner) readEntry(pid int) (bool, []gpuVRAM) {
	k := s.kfd
	dir := k.sysfs + "/proc/" + strconv.Itoa(pid)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return false, nil
	}
	if err != nil {
		return true, nil
	}
	defer unix.Close(fd)
	var vram []gpuVRAM
	seen := 0
	for {
		n, err := unix.Getdents(fd, s.buf)
		if err != nil {
			return true, nil
		}
		if n <= 0 {
			return true, vram
		}
		for b := s.buf[:n]; len(b) >= 19; {
			reclen := int(uint16(b[16]) | uint16(b[17])<<8)
			if reclen < 19 || reclen > len(b) {
				break
			}
			name := cstr(b[19:reclen])
			b = b[reclen:]
			if seen++; seen > maxKFDEntries {
				return true, nil
			}
			id, ok := bytes.CutPrefix(name, []byte("vram_"))
			if !ok {
				continue
			}
			gid, ok := atou(id)
			gpu, known := k.gpuOf[uint32(gid)]
			if !ok || gid > 1<<32-1 || !known {
				continue // not one of the GPUs idlemon watches
			}
			n, ok := readVRAM(fd, name)
			vram = append(vram, gpuVRAM{gpu: gpu, bytes: n, ok: ok})
		}
	}
}

// readVRAM reads a vram_GPUID file (name, in the folder dirfd): a decimal
// number of bytes and a newline.
func readVRAM(dirfd int, name []byte) (uint64, bool) {
	fd, err := unix.Openat(dirfd, string(name), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	var buf [maxNumberFile + 1]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil || n <= 0 || n > maxNumberFile {
		return 0, false
	}
	return atou(bytes.TrimRight(buf[:n], "\n"))
}

// kfdUse is what one scan saw of one process on an AMD host.
type kfdUse struct {
	kfd    bool      // holds /dev/kfd open
	entry  bool      // has a KFD entry (sysfs/proc/PID)
	vram   []gpuVRAM // the entry's vram_GPUID files of the GPUs known
	render []int     // the GPUs whose render node it holds
}

// gpuVRAM is one vram_GPUID file: bytes of VRAM on gpu, or ok false when
// the file could not be read or parsed.
type gpuVRAM struct {
	gpu   int
	bytes uint64
	ok    bool
}

// amdHolders decides which GPUs each process holds (GPU -> pids, sorted)
// from what a scan saw; all is every GPU, parent a process's parent (0
// when unknown).
//
//   - A process without /dev/kfd (graphics, video) holds the GPUs whose
//     render node it has open: exact.
//   - A process with /dev/kfd open holds the GPUs its KFD entry shows VRAM
//     on (or a value that cannot be read): exact. Its render nodes do not
//     count: ROCm opens every one it can see.
//   - One whose entry shows no VRAM yet (it has just opened /dev/kfd) holds
//     every GPU its entry lists, every GPU if it lists none: conservative,
//     until a later scan sees its VRAM.
//   - One without an entry, below a process with /dev/kfd and an entry,
//     inherited the descriptor through fork (a data loader's workers):
//     KFD refuses it to any process but its opener, so it holds nothing.
//     Any other process without an entry (a kernel without proc/ in the
//     KFD folder) holds every GPU: conservative.
func amdHolders(uses map[int]*kfdUse, all []int, parent func(int) int) map[int][]int {
	out := map[int][]int{}
	for pid, u := range uses {
		for _, gpu := range heldBy(pid, u, uses, all, parent) {
			out[gpu] = append(out[gpu], pid)
		}
	}
	for _, pids := range out {
		sort.Ints(pids)
	}
	return out
}

// heldBy is the GPUs one process holds (amdHolders).
func heldBy(pid int, u *kfdUse, uses map[int]*kfdUse, all []int, parent func(int) int) []int {
	switch {
	case !u.kfd:
		return u.render
	case !u.entry:
		if forkedFromOpener(pid, uses, parent) {
			return nil
		}
		return all
	}
	var held, listed []int
	for _, v := range u.vram {
		if slices.Contains(listed, v.gpu) {
			continue
		}
		listed = append(listed, v.gpu)
		if !v.ok || v.bytes > 0 {
			held = append(held, v.gpu)
		}
	}
	switch {
	case len(held) > 0:
		return held
	case len(listed) > 0:
		return listed
	default:
		return all
	}
}

// forkedFromOpener says whether one of pid's ancestors holds /dev/kfd and
// has a KFD entry.
func forkedFromOpener(pid int, uses map[int]*kfdUse, parent func(int) int) bool {
	for steps := 0; steps < 64; steps++ {
		pid = parent(pid)
		if pid <= 1 {
			return false
		}
		if u := uses[pid]; u != nil && u.kfd && u.entry {
			return true
		}
	}
	return false
}
