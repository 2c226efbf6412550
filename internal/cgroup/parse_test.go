package cgroup

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseMountinfo(t *testing.T) {
	hybridV1 := map[string]string{}
	for _, c := range []string{"cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids"} {
		hybridV1[c] = "/sys/fs/cgroup/" + c
	}
	for _, c := range []struct {
		name, file, text string
		want             Hierarchies
	}{
		{name: "hybrid capture", file: "mountinfo-hybrid",
			want: Hierarchies{V2: "/sys/fs/cgroup/unified", V1: hybridV1}},
		{name: "debian 12 pure v2", file: "mountinfo-debian12",
			want: Hierarchies{V2: "/sys/fs/cgroup", V1: map[string]string{}}},
		{name: "co-mounted controllers, optional fields, named hierarchy",
			text: "30 22 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:5 master:2 - cgroup cgroup rw,xattr,cpu,cpuacct\n" +
				"31 22 0:28 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd\n" +
				"32 22 0:29 / /sys/fs/cgroup/net_cls,net_prio rw - cgroup cgroup rw,net_cls,net_prio,release_agent=/x\n",
			want: Hierarchies{V1: map[string]string{
				"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
				"net_cls": "/sys/fs/cgroup/net_cls,net_prio", "net_prio": "/sys/fs/cgroup/net_cls,net_prio",
			}}},
		{name: "escaped mount point, first of two mounts",
			text: `40 30 0:37 / /mnt/my\040cg\134x rw - cgroup2 cgroup2 rw` + "\n" +
				"41 30 0:37 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
			want: Hierarchies{V2: `/mnt/my cg\x`, V1: map[string]string{}}},
		{name: "a long overlay line",
			text: "50 1 0:50 / /var/lib/docker/overlay2/x/merged rw - overlay overlay rw,lowerdir=" + strings.Repeat("/l/abc:", 20000) + "/l/z\n" +
				"40 30 0:37 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			want: Hierarchies{V2: "/sys/fs/cgroup", V1: map[string]string{}}},
		{name: "a v2 mount named like v1 is not v1",
			text: "40 30 0:37 / /sys/fs/cgroup/memory rw - cgroup2 none rw,memory_recursiveprot\n",
			want: Hierarchies{V2: "/sys/fs/cgroup/memory", V1: map[string]string{}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			text := c.text
			if c.file != "" {
				text = readTestdata(t, c.file)
			}
			got, err := ParseMountinfo(strings.NewReader(text))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestParseMountinfoErrors(t *testing.T) {
	for name, text := range map[string]string{
		"no separator":    "30 22 0:27 / /sys/fs/cgroup/cpu rw cgroup cgroup rw,cpu\n",
		"short":           "30 22 0:27 / - cgroup cgroup rw,cpu\n",
		"line over 1 MiB": "30 22 0:27 / /x rw - overlay overlay rw,lowerdir=" + strings.Repeat("a", maxMountLine) + "\n",
	} {
		if _, err := ParseMountinfo(strings.NewReader(text)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestParseProcCgroup(t *testing.T) {
	for _, c := range []struct {
		name, file, text string
		want             Membership
	}{
		{name: "hybrid capture", file: "cgroup-hybrid", want: Membership{V2: "/", V1: map[string]string{
			"pids": "/", "blkio": "/", "freezer": "/", "devices": "/", "cpuset": "/", "cpuacct": "/", "cpu": "/",
			"memory": "/process_api/6d1fe6ede81c3f57a1129e58f19a8250",
		}}},
		{name: "debian 12", file: "cgroup-debian12",
			want: Membership{V2: "/system.slice/idlemon.service", V1: map[string]string{}}},
		{name: "co-mounted, colon in a path, deleted group",
			text: "4:cpu,cpuacct:/job:1\n1:name=systemd:/user.slice\n0::/idlemon/abc.x (deleted)\n",
			want: Membership{V2: "/idlemon/abc.x (deleted)", V1: map[string]string{"cpu": "/job:1", "cpuacct": "/job:1"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			text := c.text
			if c.file != "" {
				text = readTestdata(t, c.file)
			}
			got, err := ParseProcCgroup(strings.NewReader(text))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
	for _, bad := range []string{"0:/x\n", "0::x\n", "garbage\n"} {
		if _, err := ParseProcCgroup(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestReadMembershipIsBounded(t *testing.T) {
	proc := t.TempDir()
	write := func(pid, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, pid, "cgroup"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("7", "0::/a/b\n")
	write("8", "0::/a/b\n"+strings.Repeat("1:name=x:/y\n", maxRead/12+1))
	if m, err := ReadMembership(proc, 7); err != nil || m.V2 != "/a/b" {
		t.Errorf("ReadMembership(7) = %+v, %v; want V2 /a/b", m, err)
	}
	if _, err := ReadMembership(proc, 8); err == nil || !strings.Contains(err.Error(), "more than 65536 bytes") {
		t.Errorf("ReadMembership of a file over 64 KiB: %v, want an error saying so", err)
	}
}

func readTestdata(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var hybrid = Hierarchies{V2: "/sys/fs/cgroup/unified", V1: map[string]string{
	"cpu": "/sys/fs/cgroup/cpu", "memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids", "freezer": "/sys/fs/cgroup/freezer",
}}

func TestPlan(t *testing.T) {
	all := Limits{CPUWeight: 1, MemoryHigh: 6 << 30, MemoryMax: 8 << 30, PidsMax: 512}
	for _, c := range []struct {
		name string
		tree Tree
		l    Limits
		want []Enforcement
	}{
		{"pure v2", Tree{H: Hierarchies{V2: "/sys/fs/cgroup"}, Controllers: []string{"cpu", "memory", "pids"}}, all, []Enforcement{
			{Limit: "cpu_weight", Value: "1", File: "cgroup v2 cpu.weight"},
			{Limit: "memory_high", Value: "6 GiB", File: "cgroup v2 memory.high"},
			{Limit: "memory_max", Value: "8 GiB", File: "cgroup v2 memory.max"},
			{Limit: "pids_max", Value: "512", File: "cgroup v2 pids.max"},
		}},
		{"hybrid", Tree{H: hybrid}, all, []Enforcement{
			{Limit: "cpu_weight", Value: "1", File: "cgroup v1 cpu.shares (/sys/fs/cgroup/cpu)"},
			{Limit: "memory_high", Value: "6 GiB", Why: "cgroup v1 has no memory.high; memory_max is enforced"},
			{Limit: "memory_max", Value: "8 GiB", File: "cgroup v1 memory.limit_in_bytes (/sys/fs/cgroup/memory)"},
			{Limit: "pids_max", Value: "512", File: "cgroup v1 pids.max (/sys/fs/cgroup/pids)"},
		}},
		{"hybrid, memory_high alone", Tree{H: hybrid}, Limits{MemoryHigh: 1536 << 20}, []Enforcement{
			{Limit: "memory_high", Value: "1536 MiB", Why: "cgroup v1 has no memory.high; set memory_max for a hard ceiling"},
		}},
		{"v2 has pids only, no v1", Tree{H: Hierarchies{V2: "/sys/fs/cgroup"}, Controllers: []string{"pids"}},
			Limits{CPUWeight: 100, MemoryMax: 12345, PidsMax: 9}, []Enforcement{
				{Limit: "cpu_weight", Value: "100", Why: "no cpu controller in the v2 hierarchy (/sys/fs/cgroup) nor a v1 cpu hierarchy"},
				{Limit: "memory_max", Value: "12345 B", Why: "no memory controller in the v2 hierarchy (/sys/fs/cgroup) nor a v1 memory hierarchy"},
				{Limit: "pids_max", Value: "9", File: "cgroup v2 pids.max"},
			}},
		{"nothing set", Tree{H: hybrid}, Limits{}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, c.tree.Plan(c.l)); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestWritesFollowPlan(t *testing.T) {
	l := Limits{CPUWeight: 1, MemoryHigh: 1 << 30, MemoryMax: 2 << 30, PidsMax: 64}
	v2, v1 := (&Tree{H: hybrid}).writes(l)
	wantV1 := []v1Limit{{"cpu", "cpu.shares", "10"}, {"memory", "memory.limit_in_bytes", "2147483648"}, {"pids", "pids.max", "64"}}
	if diff := cmp.Diff(wantV1, v1, cmp.AllowUnexported(v1Limit{})); len(v2) != 0 || diff != "" {
		t.Errorf("hybrid: v2 %v, v1 (-want +got)\n%s", v2, diff)
	}
	v2, v1 = (&Tree{H: Hierarchies{V2: "/x"}, Controllers: []string{"cpu", "memory", "pids"}}).writes(l)
	wantV2 := []v2Limit{{"cpu.weight", "1"}, {"memory.high", "1073741824"}, {"memory.max", "2147483648"}, {"memory.oom.group", "1"}, {"pids.max", "64"}}
	if diff := cmp.Diff(wantV2, v2, cmp.AllowUnexported(v2Limit{})); len(v1) != 0 || diff != "" {
		t.Errorf("pure v2: v1 %v, v2 (-want +got)\n%s", v1, diff)
	}
	for weight, shares := range map[int]int{1: 10, 100: 1024, 10000: 102400} {
		if got := cpuShares(weight); got != shares {
			t.Errorf("cpuShares(%d) = %d, want %d", weight, got, shares)
		}
	}
	if got := cpuShares(0); got != 2 {
		t.Errorf("cpuShares(0) = %d, want the floor 2", got)
	}
}

func TestGroupName(t *testing.T) {
	for _, c := range []struct{ nonce, job, want string }{
		{"0123abcd0123abcd", "train", "0123abcd0123abcd.train"},
		{"0123abcd0123abcd", "my job/../x y", "0123abcd0123abcd.my_job_.._x_y"},
		{"0123abcd0123abcd", "", "0123abcd0123abcd._"},
		{"0123abcd0123abcd", "été", "0123abcd0123abcd.__t__"},
	} {
		got := GroupName(c.nonce, c.job)
		if got != c.want {
			t.Errorf("GroupName(%q, %q) = %q, want %q", c.nonce, c.job, got, c.want)
		}
		if nonce, _, ok := ParseGroupName(got); !ok || nonce != c.nonce {
			t.Errorf("ParseGroupName(%q) = %q, %v; want the nonce back", got, nonce, ok)
		}
	}
	if got := GroupName("0123abcd0123abcd", strings.Repeat("j", 300)); len(got) != 255 {
		t.Errorf("a long job's name has %d bytes, want 255", len(got))
	}
	for _, foreign := range []string{"supervisor", "user.slice", "system.slice", "0123ABCD.x", "0123abc.x", "zzzzzzzz.job",
		"0123abcd0123abcd.", ".job", "0123abcd0123abcd.a b", "0123abcd0123abcd.x (deleted)", "cgroup.procs"} {
		if n, j, ok := ParseGroupName(foreign); ok {
			t.Errorf("ParseGroupName(%q) = %q, %q, true; want not ours", foreign, n, j)
		}
	}
}

func TestGroupOf(t *testing.T) {
	const g = "0123abcd0123abcd.train"
	for _, c := range []struct {
		name, rel, path, want string
	}{
		{"in the group", "/idlemon", "/idlemon/" + g, g},
		{"below the group", "/idlemon", "/idlemon/" + g + "/sub/deeper", g},
		{"tree is the root", "/", "/" + g, g},
		{"tree is the root, below", "/", "/" + g + "/x", g},
		{"the tree itself", "/idlemon", "/idlemon", ""},
		{"the supervisor", "/idlemon", "/idlemon/supervisor", ""},
		{"lookalike tree", "/idlemon", "/idlemonx/" + g, ""},
		{"lookalike tree, root-relative", "/a/b", "/a/bc/" + g, ""},
		{"a tree below ours", "/a", "/a/b/" + g, ""},
		{"dot-dot out", "/idlemon", "/idlemon/" + g + "/../../etc", ""},
		{"dot-dot in", "/other", "/other/../idlemon/" + g, ""},
		{"double slash", "/idlemon", "/idlemon//" + g, ""},
		{"trailing slash", "/idlemon", "/idlemon/" + g + "/", ""},
		{"deleted group", "/idlemon", "/idlemon/" + g + " (deleted)", ""},
		{"relative path", "/idlemon", "idlemon/" + g, ""},
		{"empty", "/idlemon", "", ""},
		{"foreign folder in the tree", "/idlemon", "/idlemon/user.slice", ""},
		{"root itself", "/", "/", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := &Tree{Rel: c.rel}
			got, ok := tr.GroupOf(Membership{V2: c.path})
			if got != c.want || ok != (c.want != "") {
				t.Errorf("GroupOf(%q) in %q = %q, %v; want %q", c.path, c.rel, got, ok, c.want)
			}
		})
	}
}

func TestEnableControllersOneAtATime(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte("cpuset cpu io memory hugetlb pids rdma\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctl := filepath.Join(dir, "cgroup.subtree_control")
	if err := os.WriteFile(ctl, []byte("io\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var writes []string
	enabled := []string{"io"}
	refuse := "+memory" // as the kernel refuses one that a process in a child's group blocks
	got, err := enableControllers(dir, func(path, s string) error {
		writes = append(writes, s)
		if path != ctl || s == refuse {
			return os.ErrPermission
		}
		enabled = append(enabled, strings.TrimPrefix(s, "+"))
		return os.WriteFile(ctl, []byte(strings.Join(enabled, " ")+"\n"), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"+cpu", "+memory", "+pids"}; !slices.Equal(writes, want) {
		t.Errorf("wrote %q, want %q, one at a time", writes, want)
	}
	if want := []string{"cpu", "pids"}; !slices.Equal(got, want) {
		t.Errorf("Controllers %q, want %q (memory refused)", got, want)
	}
}

func TestOpenRefusesOutsideV2(t *testing.T) {
	v2 := t.TempDir()
	for _, dir := range []string{"/tmp/x", v2 + "x/idlemon", v2 + "/../x", "relative/idlemon"} {
		if tr, err := Open(Hierarchies{V2: v2}, dir); err == nil {
			t.Errorf("Open(%q) in %s = %+v, want an error", dir, v2, tr)
		}
	}
	if _, err := Open(Hierarchies{}, "/sys/fs/cgroup/idlemon"); err == nil {
		t.Error("Open without a v2 mount: no error")
	}
}
