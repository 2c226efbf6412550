package render

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
)

func hostsOf(names ...string) *cluster.Cluster {
	c := &cluster.Cluster{Count: map[string]int{}}
	for _, n := range names {
		c.Hosts = append(c.Hosts, &cluster.Host{Name: n, Display: n})
	}
	return c
}

func groupNames(gs []*hostGroup) map[string][]string {
	out := map[string][]string{}
	for _, g := range gs {
		for _, h := range g.hosts {
			out[g.name] = append(out[g.name], h.Name)
		}
	}
	return out
}

func TestGroupPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"gpu-0001": "gpu", "gpu0001": "gpu", "h100-a01": "h100-a", "node7.example.org": "node",
		"1234": "other", "dgx": "dgx", "a100_3": "a",
	} {
		if got := groupPrefix(in); got != want {
			t.Errorf("groupPrefix(%q) = %q, want %q", in, got, want)
		}
	}
}

// [groups] first, a host named twice in the first group that names it,
// unknown hosts warned about and ignored, the rest by prefix.
func TestGroupHosts(t *testing.T) {
	c := hostsOf("gpu01", "gpu02", "gpu03", "dgx-a1", "dgx-a2", "old7")
	rules := []groupRule{
		{Name: "lab A", Hosts: []string{"gpu01", "gpu02", "ghost1", "ghost2"}},
		{Name: "lab B", Hosts: []string{"gpu02", "old7"}},
		{Name: "empty", Hosts: []string{"ghost3"}},
	}
	gs, warnings := groupHosts(c, rules)
	got := groupNames(gs)
	want := map[string][]string{"lab A": {"gpu01", "gpu02"}, "lab B": {"old7"}, "gpu": {"gpu03"}, "dgx-a": {"dgx-a1", "dgx-a2"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("groups %v, want %v", got, want)
	}
	var order []string
	for _, g := range gs {
		order = append(order, g.name)
	}
	if !slices.Equal(order, []string{"lab A", "lab B", "gpu", "dgx-a"}) {
		t.Errorf("order %v", order)
	}
	all := strings.Join(warnings, "\n")
	for _, s := range []string{"lab A: 2 hosts not in the data, ignored: ghost1, ghost2", "empty: 1 host not in the data", "gpu02 (in lab A and lab B)"} {
		if !strings.Contains(all, s) {
			t.Errorf("warnings %q lack %q", all, s)
		}
	}
}

// pageName is what a group page's file name looks like: nothing a shell,
// a URL or a path would read as more than a name.
var pageName = regexp.MustCompile(`^[a-z0-9_][a-z0-9_-]*\.html$`)

func TestPageFileIsSafe(t *testing.T) {
	for in, want := range map[string]string{
		"gpu": "gpu", "Lab A/B": "lab_a_b", "../etc/passwd": "___etc_passwd", "": "group", "-x": "_x",
		"ü": "_", strings.Repeat("a", 100): strings.Repeat("a", pageFileMax),
	} {
		got := pageFile(in)
		if got != want {
			t.Errorf("pageFile(%q) = %q, want %q", in, got, want)
		}
		if !pageName.MatchString(got + ".html") {
			t.Errorf("pageFile(%q) = %q does not look like a page", in, got)
		}
	}
	used := map[string]bool{}
	a := uniqueFile("gpu", 3, used)
	b := uniqueFile("gpu-2", 1, used) // gpu's second page
	c := uniqueFile("gpu", 1, used)
	if a != "gpu" || b != "gpu-2_2" || c != "gpu_2" {
		t.Errorf("uniqueFile: %q %q %q", a, b, c)
	}
}

// longFleetRows is fleetRows with 40-character host names and 300-byte
// command lines: the bad input for the budgets.
func longFleetRows(hosts, gpus int) []loaddata.Row {
	rows := fleetRows(hosts, gpus)
	for i := range rows {
		rows[i].Host = "rack-long-hostname-of-the-lab-" + strings.TrimPrefix(rows[i].Host, "gpu")
		if rows[i].Command != "" {
			rows[i].Command += strings.Repeat(" --an-option-with-a-long-value=/scratch/datasets/part", 6)
		}
	}
	return rows
}

// The budgets: index.html at most 1 MB and each group page at most 2 MB,
// at 1,000 and 10,000 hosts × 8 GPUs with a month of history, and with long
// host names and command lines.
func TestPageBudgets(t *testing.T) {
	cases := []struct {
		name  string
		hosts int
		long  bool
	}{{"1000", 1000, false}, {"10000", 10000, false}, {"10000-long", 10000, true}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.hosts > 1000 {
				t.Skip("10,000 hosts: not in -short")
			}
			rows := fleetRows(tc.hosts, 8)
			if tc.long {
				rows = longFleetRows(tc.hosts, 8)
			}
			rep := testReport(t, rows, "")
			rep.History = benchSummary(tc.hosts, 8, rep.Cluster.DataTime)
			p := planPages(rep)
			if p.pages == nil {
				t.Fatal("one page for a big fleet")
			}
			if len(p.index) > indexBudget {
				t.Errorf("index.html is %d bytes, over %d", len(p.index), indexBudget)
			}
			largest := 0
			hosts := 0
			for _, pg := range p.pages {
				largest = max(largest, len(pg.html))
				hosts += len(pg.hosts)
				if len(pg.html) > groupBudget {
					t.Errorf("groups/%s.html is %d bytes, over %d", pg.file, len(pg.html), groupBudget)
				}
			}
			if hosts != tc.hosts {
				t.Errorf("the group pages hold %d hosts, want %d", hosts, tc.hosts)
			}
			index := string(p.index)
			if got := boxCount(index, "f") - 1; got != rep.Cluster.Count[cluster.Free] { // the legend's
				t.Errorf("index.html has %d free squares, want one per free GPU, %d", got, rep.Cluster.Count[cluster.Free])
			}
			if got := boxCount(index, "b") - 1; got != rep.Cluster.Count[cluster.Busy] {
				t.Errorf("index.html has %d busy squares, want one per busy GPU, %d", got, rep.Cluster.Count[cluster.Busy])
			}
			mode := "a link a host, titled"
			switch {
			case strings.Contains(index, `<a class="pg ck"`) && strings.Contains(index, "<p class=f"):
				mode = "a link a page, hosts untitled"
			case strings.Contains(index, `<a class="pg ck"`):
				mode = "a link a page"
			}
			// every link says where it leads, to a screen reader too: a
			// host's by its title, a group page's by its aria-label
			if pg, named := strings.Count(index, `<a class="pg ck"`), strings.Count(index, ` aria-label="`); named < pg {
				t.Errorf("%d group page links, %d with an aria-label", pg, named)
			}
			if titled := strings.Count(index, ` title="`); mode == "a link a host, titled" && titled < tc.hosts {
				t.Errorf("%d hosts, %d titled links", tc.hosts, titled)
			}
			t.Logf("index.html %d bytes (%s); %d group pages, the largest %d bytes", len(p.index), mode, len(p.pages), largest)
		})
	}
}

// boxCount is how many squares of a state (its class letter: f, b, r, x)
// the overview's boxes draw: the sum of their classes' counts (f4) and of
// their style attributes' (--f:24).
func boxCount(index, letter string) int {
	n := 0
	for _, m := range boxClassRE.FindAllStringSubmatch(index, -1) {
		for _, tok := range strings.Fields(m[1]) {
			if k, err := strconv.Atoi(strings.TrimPrefix(tok, letter)); err == nil && strings.HasPrefix(tok, letter) {
				n += k
			}
		}
	}
	for _, m := range boxStyleRE.FindAllStringSubmatch(index, -1) {
		if m[1] == letter {
			k, _ := strconv.Atoi(m[2])
			n += k
		}
	}
	return n
}

var (
	boxClassRE = regexp.MustCompile(`class="?([^">]*)`)
	boxStyleRE = regexp.MustCompile(`--([fbrx]):(\d+);`)
)

// A host's box on the overview says with its class how many of its GPUs
// are in each state (the style sheet draws them) and with its title, the
// link's accessible name, the host's name and the same counts in words.
func TestOverviewBox(t *testing.T) {
	for _, tc := range []struct {
		status hoststatus.Status
		count  map[string]int
		gpus   int
		want   string
	}{
		{hoststatus.OK, map[string]int{cluster.Free: 3, cluster.Busy: 4, cluster.Failed: 1}, 8, ` class="f3 b4 x1" title="gpu7: 3 free, 4 busy, 1 failed"`},
		{hoststatus.OK, map[string]int{cluster.Reserved: 8}, 8, ` class=r8 title="gpu7: 8 reserved"`},
		{hoststatus.OK, map[string]int{cluster.Free: 2, cluster.Busy: 30}, 32, ` class=f2 style="--b:30;" title="gpu7: 2 free, 30 busy"`},
		{hoststatus.Timeout, map[string]int{}, 0, ` class=dn title="gpu7: down"`},
		{hoststatus.OK, map[string]int{}, 0, ` title="gpu7: no GPUs"`},
	} {
		h := &cluster.Host{Name: "gpu7", Display: "gpu7", Status: tc.status, Count: tc.count, GPUs: make([]*cluster.GPU, tc.gpus)}
		var b strings.Builder
		w := bufio.NewWriter(&b)
		writeBox(w, h, true)
		w.Flush()
		if b.String() != tc.want {
			t.Errorf("%v %v: %s, want %s", tc.status, tc.count, b.String(), tc.want)
		}
	}
}

// A small fleet keeps one page; a big one gets group pages, split and
// linked; when it shrinks again, the group pages of groups gone are
// removed, and nothing else in the folder.
func TestGroupPagesWrittenAndRemoved(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "load_data.csv")
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[groups]\nlab a = gpu[0000-0099]\n"), 0o644)
	run := func(rows []loaddata.Row) {
		t.Helper()
		if err := loaddata.WriteFile(csv, rows); err != nil {
			t.Fatal(err)
		}
		if err := Main(context.Background(), []string{"-c", ini, "-i", csv, "-o", filepath.Join(dir, "index.html")}, io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	run(fleetRows(1500, 8))
	groups := filepath.Join(dir, groupsDir)
	names := func() []string {
		es, _ := os.ReadDir(groups)
		var out []string
		for _, e := range es {
			if !strings.HasPrefix(e.Name(), ".") { // render's own record of its pages
				out = append(out, e.Name())
			}
		}
		return out
	}
	got := names()
	if len(got) < 3 || got[0] != "gpu-2.html" || !slices.Contains(got, "gpu.html") || !slices.Contains(got, "lab_a.html") {
		t.Fatalf("group pages %v, want lab_a.html and gpu.html split in two or more", got)
	}
	index, _ := os.ReadFile(filepath.Join(dir, "index.html"))
	for _, s := range []string{`href=groups/lab_a.html`, `href=groups/gpu-2.html`, `href=groups/gpu.html#gpu0100`, "Free GPUs"} {
		if !strings.Contains(string(index), s) {
			t.Errorf("index.html lacks %q", s)
		}
	}
	page, _ := os.ReadFile(filepath.Join(groups, "gpu-2.html"))
	for _, s := range []string{`<a href="../index.html">overview</a>`, `<a href="gpu.html">1</a>`, `<b>2</b>`, `class=gpu data-state=`, `href="../status.json"`} {
		if !strings.Contains(string(page), s) {
			t.Errorf("gpu-2.html lacks %q", s)
		}
	}
	os.WriteFile(filepath.Join(groups, "notes.txt"), []byte("mine"), 0o644)
	os.WriteFile(filepath.Join(groups, "Mine.HTML"), []byte("mine"), 0o644)
	os.WriteFile(filepath.Join(groups, "about.html"), []byte("named like ours, never written by render"), 0o644)
	run(fleetRows(50, 8))
	if got := names(); !slices.Equal(got, []string{"Mine.HTML", "about.html", "notes.txt"}) {
		t.Errorf("after a small run the groups folder holds %v, want only the files that are not ours", got)
	}
	index, _ = os.ReadFile(filepath.Join(dir, "index.html"))
	if !strings.Contains(string(index), `data-host=gpu0049`) {
		t.Errorf("a small fleet's index.html is not the whole page")
	}
}

func TestGroupsConfig(t *testing.T) {
	cfg, err := ParseConfig(strings.NewReader("[groups]\nlab a = gpu[1-3], dgx7\nb = x\n"), "config.ini")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(cfg.Groups); got != "[{lab a [gpu1 gpu2 gpu3 dgx7]} {b [x]}]" {
		t.Errorf("groups %s", got)
	}
	for _, bad := range []string{"[groups]\na = gpu[1-\n", "[groups]\na =\n"} {
		if _, err := ParseConfig(strings.NewReader(bad), "config.ini"); err == nil || !strings.Contains(err.Error(), "config.ini:2") {
			t.Errorf("%q: error %v, want one at line 2", bad, err)
		}
	}
}

// prom_detail = host has no series per GPU, fleet none per host either;
// the fleet's counts and the users' series stay.
func TestPromDetail(t *testing.T) {
	rows := readRows(t, "testdata/load_data.csv")
	out := map[string]string{}
	for _, d := range []string{promGPU, promHost, promFleet} {
		rep := testReport(t, rows, "")
		rep.Config.PromDetail = d
		var b strings.Builder
		if err := writeProm(&b, rep); err != nil {
			t.Fatal(err)
		}
		out[d] = b.String()
	}
	for d, s := range out {
		for _, want := range []string{`gpumon_gpus{state="free"}`, "gpumon_user_gpus{", "gpumon_data_timestamp_seconds "} {
			if !strings.Contains(s, want) {
				t.Errorf("prom_detail = %s: no %s", d, want)
			}
		}
	}
	if !strings.Contains(out[promGPU], `gpumon_gpu_state{host="`) {
		t.Error("prom_detail = gpu: no gpumon_gpu_state")
	}
	if strings.Contains(out[promHost], `gpu="`) || !strings.Contains(out[promHost], `gpumon_host_gpus{host="`) ||
		!strings.Contains(out[promHost], `gpumon_host_up{host="`) || !strings.Contains(out[promHost], `gpumon_host_gpu_memory_used_bytes{host="`) {
		t.Errorf("prom_detail = host:\n%s", out[promHost])
	}
	if strings.Contains(out[promFleet], `host="`) || !strings.Contains(out[promFleet], `gpumon_hosts{status="ok"}`) {
		t.Errorf("prom_detail = fleet:\n%s", out[promFleet])
	}
	if len(out[promFleet]) >= len(out[promHost]) || len(out[promHost]) >= len(out[promGPU]) {
		t.Errorf("sizes gpu %d, host %d, fleet %d: want each smaller", len(out[promGPU]), len(out[promHost]), len(out[promFleet]))
	}
}

// Host and group names are text on the overview and the group pages, never
// markup, in links and titles too.
func TestBigFleetNamesAreEscaped(t *testing.T) {
	rows := fleetRows(250, 2)
	evil := `evil"'<b>&amp;=x y`
	for i := range rows {
		if rows[i].Host == "gpu0007" {
			rows[i].Host = evil + "7"
		}
	}
	rep := testReport(t, rows, "")
	rep.Config.Groups = []groupRule{{Name: `<i>lab</i> "a"`, Hosts: []string{evil + "7", "gpu0001"}}}
	p := planPages(rep)
	if p.pages == nil {
		t.Fatal("no group pages")
	}
	all := []string{string(p.index)}
	for _, pg := range p.pages {
		all = append(all, string(pg.html))
	}
	for i, s := range all {
		for _, bad := range []string{`"'<b>`, "<i>lab", `evil"`, "&amp;=x"} {
			if strings.Contains(s, bad) {
				t.Errorf("page %d holds %q unescaped", i, bad)
			}
		}
	}
	if !strings.Contains(all[0], `href="groups/_i_lab__i___a_.html#evil%22%27%3Cb%3E&amp;amp%3B=x%20y7"`) {
		t.Errorf("the overview does not link to the evil host's card")
	}
}
