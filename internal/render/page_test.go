package render

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"html"
	"html/template"
	"io"
	"io/fs"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/assets"
	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/reservations"
	"github.com/gpumon/gpumon/internal/testenv"
	"github.com/gpumon/gpumon/templates"
)

func TestSpanText(t *testing.T) {
	for _, tt := range []struct {
		s    int64
		want string
	}{
		{-5, "0 s"}, {0, "0 s"}, {59, "59 s"}, {60, "1 min"}, {3599, "59 min"},
		{3600, "1 h"}, {3661, "1 h 1 min"}, {93784, "26 h 3 min"}, {48*3600 - 1, "47 h 59 min"},
		{48 * 3600, "2 d"}, {2*86400 + 3600 + 59, "2 d 1 h"}, {10 * 86400, "10 d"},
	} {
		if got := spanText(tt.s); got != tt.want {
			t.Errorf("spanText(%d) = %q, want %q", tt.s, got, tt.want)
		}
	}
}

func TestSettingText(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{60 * time.Second, "1 min"}, {90 * time.Second, "90 s"}, {15 * time.Minute, "15 min"},
		{90 * time.Minute, "1 h 30 min"}, {time.Hour, "1 h"}, {72 * time.Hour, "3 d"},
	} {
		if got := settingText(tt.d); got != tt.want {
			t.Errorf("settingText(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

// cellOf is the markup writeGPU writes for g alone, on a host of g's model.
func cellOf(g *cluster.GPU) string {
	var b strings.Builder
	w := bufio.NewWriter(&b)
	h := &cluster.Host{Name: "h", Display: "h", ModelName: g.Name}
	writeGPU(w, h, g, &Report{Loc: time.UTC}, nil, nil)
	w.Flush()
	return b.String()
}

func proc(user string, mib float64) *cluster.Proc {
	p := &cluster.Proc{PID: loaddata.IntOf(1), User: user, Command: "python"}
	if mib >= 0 {
		p.MemMiB = loaddata.Num(mib)
	}
	return p
}

// inContainer puts p in a container; inJob in a Slurm job.
func inContainer(p *cluster.Proc, id, name string) *cluster.Proc {
	p.Container, p.ContainerName = id, name
	return p
}

func inJob(p *cluster.Proc, id, name, partition string) *cluster.Proc {
	p.SlurmJob, p.SlurmJobName, p.SlurmPartition = id, name, partition
	return p
}

// A cell says who holds its GPU, or for whom it is kept, without a hover.
func TestCellSaysWho(t *testing.T) {
	idle := proc("idlejob", 100)
	idle.Preemptible = true
	xorg := proc("root", 400)
	xorg.Ignored = true
	until := time.Date(2026, 11, 30, 18, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name  string
		state string
		procs []*cluster.Proc
		resv  *reservations.Reservation
		want  string // the cell's second line, up to the detail
	}{
		{"one user", cluster.Busy, []*cluster.Proc{proc("alice", 63488)}, nil, `<p class=u><b>alice</b> 62G`},
		{"two users, the biggest first", cluster.Busy, []*cluster.Proc{proc("bob", 1024), proc("alice", 30000)}, nil,
			`<p class=u><b>alice, bob</b> 30G`},
		{"one user, two processes", cluster.Busy, []*cluster.Proc{proc("alice", 1024), proc("alice", 1024)}, nil,
			`<p class=u><b>alice</b> 2.0G`},
		{"more users than a cell names", cluster.Busy, []*cluster.Proc{proc("a", 1), proc("b", 1), proc("c", 1), proc("d", 1), proc("e", 1)}, nil,
			`<p class=u><b>a, b, c, d, …</b> 0.0G`},
		{"memory unknown (Windows)", cluster.Busy, []*cluster.Proc{proc("alice", -1)}, nil, `<p class=u><b>alice</b>`},
		{"user unknown", cluster.Busy, []*cluster.Proc{proc("", 2048)}, nil, `<p class=u><b>(unknown)</b> 2.0G`},
		{"ignored and idle-time processes hold nothing", cluster.Busy, []*cluster.Proc{xorg, idle, proc("bob", 2048)}, nil,
			`<p class=u><b>bob</b> 2.0G <span class=tag>idle job</span>`},
		{"memory but no process", cluster.Busy, nil, nil, `<p class=u>no process visible`},
		{"markup in a name is text", cluster.Busy, []*cluster.Proc{proc(`<b>"x"</b>`, 1024)}, nil,
			`<p class=u><b>&lt;b&gt;&#34;x&#34;&lt;/b&gt;</b> 1.0G`},
		{"reserved", cluster.Reserved, nil, &reservations.Reservation{Name: "carol", Comment: "ICML", Until: until}, `<p class=u><b>carol: ICML</b>`},
		{"reserved, no comment", cluster.Reserved, nil, &reservations.Reservation{Name: "carol"}, `<p class=u><b>carol</b>`},
		{"reserved, comment only", cluster.Reserved, nil, &reservations.Reservation{Comment: "ICML"}, `<p class=u><b>ICML</b>`},
		{"reserved, nameless", cluster.Reserved, nil, &reservations.Reservation{}, ``},
		{"free with idlemon's job", cluster.Free, []*cluster.Proc{idle}, nil, `<p class=u><span class=tag>idle job</span>`},
		{"free", cluster.Free, nil, nil, ``},
		{"busy GPU of someone else's reservation: its users, and whose it is", cluster.Busy, []*cluster.Proc{proc("bob", 1024)},
			&reservations.Reservation{Name: "carol"}, `<p class=u><b>bob</b> 1.0G <span class=tag>reserved: carol</span>`},
		{"busy GPU of its holder's reservation: its users", cluster.Busy, []*cluster.Proc{proc("carol", 1024)},
			&reservations.Reservation{Name: "carol"}, `<p class=u><b>carol</b> 1.0G`},
		{"markup in a reservation's name is text", cluster.Busy, []*cluster.Proc{proc("bob", 1024)},
			&reservations.Reservation{Name: "<script>x</script>"}, `<p class=u><b>bob</b> 1.0G <span class=tag>reserved: &lt;script&gt;x&lt;/script&gt;</span>`},
		// root in a container is the container; everyone else their user
		{"root in a named container", cluster.Busy, []*cluster.Proc{inContainer(proc("root", 63488), "3f2a9c1e4b7d", "vllm-server")}, nil,
			`<p class=u><b>vllm-server</b> 62G`},
		{"root in a container without a name: its id", cluster.Busy, []*cluster.Proc{inContainer(proc("root", 63488), "3f2a9c1e4b7d", "")}, nil,
			`<p class=u><b>3f2a9c1e4b7d</b> 62G`},
		{"root without a container", cluster.Busy, []*cluster.Proc{proc("root", 63488)}, nil, `<p class=u><b>root</b> 62G`},
		{"alice in a container", cluster.Busy, []*cluster.Proc{inContainer(proc("alice", 63488), "3f2a9c1e4b7d", "vllm-server")}, nil,
			`<p class=u><b>alice</b> 62G`},
		{"two containers of root are two holders", cluster.Busy, []*cluster.Proc{
			inContainer(proc("root", 1024), "3f2a9c1e4b7d", "a"), inContainer(proc("root", 2048), "0f1e2d3c4b5a", "b"), proc("root", 512)}, nil,
			`<p class=u><b>b, a, root</b> 3.5G`},
		{"a Slurm job is in the detail, not the cell", cluster.Busy, []*cluster.Proc{inJob(proc("alice", 63488), "1233_5", "llama", "gpu")}, nil,
			`<p class=u><b>alice</b> 62G`},
		{"markup, a newline and a bidi override in a container's name are inert text", cluster.Busy,
			[]*cluster.Proc{inContainer(proc("root", 1024), "3f2a9c1e4b7d", "<b>\"x\"&\n\u202eevil")}, nil,
			`<p class=u><b>&lt;b&gt;&#34;x&#34;&amp;??evil</b> 1.0G`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := &cluster.GPU{HasIndex: true, Name: "X", Short: "X", State: tt.state, Procs: tt.procs, Reservation: tt.resv,
				MemUsed: loaddata.Num(1000), MemTotal: loaddata.Num(8000), Util: loaddata.Num(50), Temp: loaddata.Num(40)}
			cell := cellOf(g)
			got := cell[strings.Index(cell, "50%")+3 : strings.Index(cell, "<aside>")]
			if got != tt.want {
				t.Errorf("second line %q, want %q\ncell: %s", got, tt.want, cell)
			}
		})
	}
}

// A GPU that reports memory but no utilization says why: an NVIDIA GPU
// (or one made without a vendor) is in MIG mode, an AMD GPU's tool gives
// none (a partition), never called MIG; a lost GPU and one with nothing
// known say nothing.
func TestCellSaysWhyNoUtilization(t *testing.T) {
	mig := []string{"<span class=mig>no util (MIG)</span>", "<p class=n>" + migNote + "</p>"}
	amd := []string{"<span class=mig>no util</span>", "<p class=n>" + noUtilNote + "</p>"}
	for _, tt := range []struct {
		name string
		g    cluster.GPU
		want []string // the cell's words and the detail's note; nil: none
	}{
		{"MIG", cluster.GPU{MemUsed: loaddata.Num(11125), MemTotal: loaddata.Num(81559), State: cluster.Busy}, mig},
		{"MIG, vendor known", cluster.GPU{Vendor: loaddata.VendorNVIDIA, MemUsed: loaddata.Num(11125), MemTotal: loaddata.Num(81559), State: cluster.Busy}, mig},
		{"AMD partition", cluster.GPU{Vendor: loaddata.VendorAMD, MemUsed: loaddata.Num(283), MemTotal: loaddata.Num(196592), State: cluster.Free}, amd},
		{"utilization known", cluster.GPU{MemUsed: loaddata.Num(1), MemTotal: loaddata.Num(81559), Util: loaddata.Num(0), State: cluster.Free}, nil},
		{"AMD, utilization known", cluster.GPU{Vendor: loaddata.VendorAMD, MemUsed: loaddata.Num(283), MemTotal: loaddata.Num(196592), Util: loaddata.Num(0), State: cluster.Free}, nil},
		{"lost", cluster.GPU{Error: "GPU is lost", State: cluster.Failed}, nil},
		{"AMD lost", cluster.GPU{Vendor: loaddata.VendorAMD, Error: "GPU is lost", State: cluster.Failed}, nil},
		{"nothing known", cluster.GPU{State: cluster.Free}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cell := cellOf(&tt.g)
			for _, s := range slices.Concat(mig, amd) {
				if got, want := strings.Contains(cell, s), slices.Contains(tt.want, s); got != want {
					t.Errorf("cell has %q: %v, want %v\n%s", s, got, want, cell)
				}
			}
		})
	}
}

func TestHostStats(t *testing.T) {
	for _, tt := range []struct {
		name string
		h    cluster.Host
		want string
	}{
		{"all", cluster.Host{CPUs: loaddata.IntOf(64), Load1: loaddata.Num(3.5), MemUsed: loaddata.Num(120000), MemTotal: loaddata.Num(515000)},
			"64 CPUs · load 3.5 · RAM 117/503G"},
		{"one CPU", cluster.Host{CPUs: loaddata.IntOf(1), Load1: loaddata.Num(0.02)}, "1 CPU · load 0.02"},
		{"RAM only", cluster.Host{MemTotal: loaddata.Num(2097152)}, "RAM ?/2048G"},
		{"nothing (a host that failed)", cluster.Host{}, ""},
	} {
		if got := hostStats(&tt.h); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

// A cell names its model on its own line only on a host of mixed models.
func TestCellNamesModelOnMixedHost(t *testing.T) {
	g := &cluster.GPU{HasIndex: true, Name: "NVIDIA H100 80GB HBM3", Short: "H100 80GB HBM3", State: cluster.Free,
		MemUsed: loaddata.Num(1), MemTotal: loaddata.Num(81559), Util: loaddata.Num(0)}
	for _, tt := range []struct {
		name, model string
		named       bool
	}{
		{"one model, in the card's header", g.Name, false},
		{"mixed models", "", true},
	} {
		var b strings.Builder
		w := bufio.NewWriter(&b)
		writeGPU(w, &cluster.Host{Name: "h", Display: "h", ModelName: tt.model}, g, &Report{Loc: time.UTC}, nil, nil)
		w.Flush()
		if named := strings.Contains(b.String(), "tabindex=0><p class=m>H100 80GB HBM3<p>"); named != tt.named {
			t.Errorf("%s: the cell names its model: %v, want %v\n%s", tt.name, named, tt.named, b.String())
		}
	}
}

// What the detail's "job / container" column says of a process: its Slurm
// job's id, name and partition, its container by name (else id) and pod,
// each printable and cut.
func TestJobText(t *testing.T) {
	const pod = "6a3f0a43-5b7e-4c1e-9a8d-2f1e0c9b7a11"
	for _, tt := range []struct {
		name string
		p    cluster.Proc
		want string
	}{
		{"nothing known", cluster.Proc{User: "alice"}, ""},
		{"Slurm job", cluster.Proc{SlurmJob: "1233_5", SlurmJobName: "llama-7b", SlurmPartition: "gpu"}, "1233_5 llama-7b (gpu)"},
		{"Slurm job squeue did not name", cluster.Proc{SlurmJob: "1233"}, "1233"},
		{"Slurm job without a partition", cluster.Proc{SlurmJob: "1233", SlurmJobName: "x"}, "1233 x"},
		{"Slurm job without a name", cluster.Proc{SlurmJob: "1233", SlurmPartition: "gpu"}, "1233 (gpu)"},
		{"a name without an id", cluster.Proc{SlurmJobName: "x", SlurmPartition: "gpu"}, "x (gpu)"},
		{"container by name, with its pod", cluster.Proc{Container: "3f2a9c1e4b7d", ContainerName: "vllm-server", Pod: pod},
			"vllm-server · pod 6a3f0a43…"},
		{"container by id", cluster.Proc{Container: "3f2a9c1e4b7d"}, "3f2a9c1e4b7d"},
		{"a pod alone", cluster.Proc{Pod: pod}, "pod 6a3f0a43…"},
		{"a short pod id is whole", cluster.Proc{Pod: "6a3f0a43"}, "pod 6a3f0a43"},
		{"a job in a container", cluster.Proc{SlurmJob: "7", Container: "3f2a9c1e4b7d", ContainerName: "c"}, "7 · c"},
		{"a long name is cut", cluster.Proc{SlurmJob: "7", SlurmJobName: strings.Repeat("n", 1000)},
			"7 " + strings.Repeat("n", jobNameMax-len("…")) + "…"},
		{"a long container name is cut", cluster.Proc{ContainerName: strings.Repeat("c", 1000)},
			strings.Repeat("c", containerMax-len("…")) + "…"},
		{"newlines, tabs and bidi are ?", cluster.Proc{SlurmJob: "7\n8", SlurmJobName: "a\tb\u202ec", SlurmPartition: "p\u200bq",
			ContainerName: "x\u2066y", Pod: "\x1b[2J"}, "7?8 a?b?c (p?q) · x?y · pod ?[2J"},
		{"invalid UTF-8 is ?", cluster.Proc{SlurmJobName: "a\xffb"}, "a?b"},
		{"markup stays as it is (esc escapes it)", cluster.Proc{SlurmJobName: "<script>&"}, "<script>&"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := jobText(&tt.p); got != tt.want {
				t.Errorf("jobText = %q, want %q", got, tt.want)
			}
		})
	}
}

// The detail's process table has a "job / container" cell before the
// command in every row where any process has a job or a container, and
// none where none has (the page of a cluster without them pays nothing).
func TestDetailJobColumn(t *testing.T) {
	row := regexp.MustCompile(`<tr(?: class=x)?>((?:<td>[^<]*(?:<em>[^<]*</em>)?)*)`)
	for _, tt := range []struct {
		name  string
		procs []*cluster.Proc
		want  [][]string // each row's cells
	}{
		{"no job, no container", []*cluster.Proc{proc("alice", 1024), proc("bob", 1024)}, [][]string{
			{"alice", "1", "1.0G", "?", "python"}, {"bob", "1", "1.0G", "?", "python"}}},
		{"one process in a job: a cell in every row", []*cluster.Proc{inJob(proc("alice", 1024), "1233_5", "llama", "gpu"), proc("bob", 1024)},
			[][]string{{"alice", "1", "1.0G", "?", "1233_5 llama (gpu)", "python"}, {"bob", "1", "1.0G", "?", "", "python"}}},
		{"root in a container keeps root in the table", []*cluster.Proc{inContainer(proc("root", 1024), "3f2a9c1e4b7d", "vllm-server")},
			[][]string{{"root", "1", "1.0G", "?", "vllm-server", "python"}}},
		{"markup in a job's name is escaped", []*cluster.Proc{inJob(proc("alice", 1024), "1", `<script>"&'`, "")},
			[][]string{{"alice", "1", "1.0G", "?", "1 &lt;script&gt;&#34;&amp;&#39;", "python"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := &cluster.GPU{HasIndex: true, Name: "X", Short: "X", State: cluster.Busy, Procs: tt.procs,
				MemUsed: loaddata.Num(1000), MemTotal: loaddata.Num(8000), Util: loaddata.Num(50)}
			cell := cellOf(g)
			var got [][]string
			for _, m := range row.FindAllStringSubmatch(cell, -1) {
				got = append(got, strings.Split(strings.TrimPrefix(m[1], "<td>"), "<td>"))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("rows (-want +got):\n%s\ncell: %s", diff, cell)
			}
		})
	}
}

// The users table names each user's jobs and containers, the first few,
// and has no such column where nobody has one.
func TestUsersTableJobs(t *testing.T) {
	for _, tt := range []struct {
		name string
		u    cluster.User
		want string
	}{
		{"none", cluster.User{Name: "alice"}, ""},
		{"jobs", cluster.User{Jobs: []string{"998", "1233_5"}}, "998, 1233_5"},
		{"jobs, then containers", cluster.User{Jobs: []string{"998"}, Containers: []string{"vllm-server"}}, "998, vllm-server"},
		{"capped", cluster.User{Jobs: []string{"1", "2", "3"}, Containers: []string{"a", "b", "c"}}, "1, 2, 3, a +2 more"},
		{"just at the cap", cluster.User{Jobs: []string{"1", "2"}, Containers: []string{"a", "b"}}, "1, 2, a, b"},
		{"printable and cut", cluster.User{Containers: []string{"a\u202eb", strings.Repeat("c", 100)}},
			"a?b, " + strings.Repeat("c", containerMax-len("…")) + "…"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := userJobsText(&tt.u); got != tt.want {
				t.Errorf("userJobsText = %q, want %q", got, tt.want)
			}
		})
	}
}

// templateViews are views that, together, run every branch of
// templates/page.html: a group page with everything on it, and an
// overview of data with no time.
func templateViews(t testing.TB) map[string]*pageView {
	t.Helper()
	rep := testReport(t, readRows(t, "testdata/load_data.csv"), "testdata/reservations.json")
	group := pageViewOf(rep)
	group.Warnings = []string{"a warning"}
	group.LiveText = "1 min"
	group.MoreModels = &moreModels{N: 2, Free: 1, Total: 16}
	group.DownGPUs, group.IdleHeld, group.Degraded = 2, 1, 1
	group.UtilFrom, group.UtilTo, group.UtilHours = "from", "to", 24
	group.UserJobs = true
	group.UserHistory = true
	group.TextLink, group.FreeLink, group.Privacy = "../index.txt", "../free.txt", "commands hidden"
	group.Users = append(group.Users, userView{Name: "carol", Past: true, GPUHours30d: "12", IdleHours30d: "1.0", KWh30d: "3.5", Efficiency30d: "40%"})
	group.Cost = &costView{Total: "12.00 EUR", GPUHours: "10", KWh: "2.0", EnergyShare: "energy known for 50% of them",
		Unpriced: "not counting 1.0 GPU-hours of T4, without a price", Teams: []teamView{{Name: "vision", GPUHours: "10", KWh: "2.0", Cost: "11.00 EUR", Unpriced: "1.0 GPU-h without a price"}}}
	group.Up, group.GroupName, group.IdleLink = "../index.html", "gpu", "../index.html#idle"
	group.Nav = []navLink{{N: 1, Href: "gpu.html", Here: true}, {N: 2, Href: "gpu-2.html"}}
	group.Page, group.State, group.Hash, group.Sum, group.Build = "groups/gpu.html", "../page-state.json", "frame", "sum", "build"
	overview := pageViewOf(rep)
	overview.Overview = true
	overview.Age, overview.Down, overview.Hosts = "", 0, 2
	overview.Users = nil
	return map[string]*pageView{"group page": group, "overview": overview}
}

// executePage runs the page's three templates on v, as HTML does.
func executePage(tmpl *template.Template, v any) error {
	for _, name := range []string{"head", "tail", "end"} {
		if err := tmpl.ExecuteTemplate(io.Discard, name, v); err != nil {
			return err
		}
	}
	return nil
}

// A field the template names that the view lacks (a typo) is an error,
// not an empty string: each field named in templates/page.html, renamed
// in a copy of it, makes the page fail with a view that has every field.
func TestPageTemplateFailsOnUnknownField(t *testing.T) {
	src, err := fs.ReadFile(templates.FS, "page.html")
	if err != nil {
		t.Fatal(err)
	}
	views := templateViews(t)
	for name, v := range views {
		if err := executePage(pageTmpl, v); err != nil {
			t.Fatalf("the page fails with the %s's view: %v", name, err)
		}
	}
	action := regexp.MustCompile(`(?s)\{\{.*?\}\}`)
	field := regexp.MustCompile(`\.[A-Z]\w*`)
	renamed := 0
	for _, a := range action.FindAllIndex(src, -1) {
		for _, f := range field.FindAllIndex(src[a[0]:a[1]], -1) {
			at := a[0] + f[1] // the field name's end in src
			typo := string(src[a[0]+f[0]+1:at]) + "Typo"
			copied := string(src[:at]) + "Typo" + string(src[at:])
			tmpl, err := newPageTemplate().Parse(copied)
			if err != nil {
				t.Fatalf("%s: %v", typo, err)
			}
			failed := false
			for _, v := range views {
				if err := executePage(tmpl, v); err != nil && strings.Contains(err.Error(), typo) {
					failed = true
				}
			}
			if !failed {
				t.Errorf("the template runs with %s in place of a field: the typo renders as nothing", typo)
			}
			renamed++
		}
	}
	if renamed < 50 {
		t.Errorf("renamed %d fields in the template, want them all (more than 50)", renamed)
	}
	t.Run("a map is missing a key", func(t *testing.T) {
		if err := pageTmpl.ExecuteTemplate(io.Discard, "end", map[string]any{"JSONLink": ""}); err == nil {
			t.Error("a map without the keys the template names executes without error")
		}
	})
}

// Every field of the view is shown by the template: one it does not name
// is dead.
func TestPageViewFieldsAreUsed(t *testing.T) {
	src, err := fs.ReadFile(templates.FS, "page.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[pageView](), reflect.TypeFor[userView](), reflect.TypeFor[modelView](),
		reflect.TypeFor[moreModels](), reflect.TypeFor[navLink](), reflect.TypeFor[costView](), reflect.TypeFor[teamView]()} {
		for i := range typ.NumField() {
			f := typ.Field(i).Name
			if !regexp.MustCompile(`\.` + f + `\b`).Match(src) {
				t.Errorf("%s.%s is not in templates/page.html", typ.Name(), f)
			}
		}
	}
}

// The page goldens hold the markup: the inlined style sheet and script,
// and the script's hash in the page's CSP, are placeholders there, so a
// change of style or script rewrites no golden, and a change of markup is
// not lost in the diff of one. TestPageInlinesAssets checks them instead.
const (
	cssPlaceholder  = "/* assets/style.css */"
	jsPlaceholder   = "// assets/page.js"
	hashPlaceholder = "sha256-(assets/page.js)"
)

// cspHash is the script's hash in the CSP meta tag, as html/template
// escapes it in an attribute (' + and = as character references).
var cspHash = regexp.MustCompile(`<meta http-equiv="Content-Security-Policy" content="[^"]*&#39;sha256-((?:[A-Za-z0-9/=]|&#43;|&#61;)+)&#39;`)

// checkAssets fails the test unless the page inlines assets.CSS and
// assets.JS whole, each once, as the only style sheet and script, and
// allows exactly that script by its hash in its CSP.
func checkAssets(t testing.TB, page string) {
	t.Helper()
	styles := regexp.MustCompile(`(?s)<style>(.*?)</style>`).FindAllStringSubmatch(page, -1)
	if len(styles) != 1 || styles[0][1] != assets.CSS {
		t.Errorf("the page has %d <style> elements, want one that holds exactly assets/style.css", len(styles))
	}
	scripts := regexp.MustCompile(`(?s)<script>(.*?)</script>`).FindAllStringSubmatch(page, -1)
	if len(scripts) != 1 || scripts[0][1] != assets.JS {
		t.Errorf("the page has %d <script> elements, want one that holds exactly assets/page.js", len(scripts))
	}
	if n := strings.Count(page, "<style"); n != 1 {
		t.Errorf("the page has %d <style tags, want 1", n)
	}
	if n := strings.Count(page, "<script"); n != 1 {
		t.Errorf("the page has %d <script tags, want 1", n)
	}
	if strings.Count(page, assets.CSS) != 1 || strings.Count(page, assets.JS) != 1 {
		t.Error("the page does not hold the style sheet and the script once each")
	}
	var allowed []string
	for _, m := range cspHash.FindAllStringSubmatch(page, -1) {
		allowed = append(allowed, "sha256-"+html.UnescapeString(m[1]))
	}
	sum := sha256.Sum256([]byte(assets.JS))
	if want := "sha256-" + base64.StdEncoding.EncodeToString(sum[:]); len(allowed) != 1 || allowed[0] != want {
		t.Errorf("the CSP allows the scripts %q, want the one of assets/page.js, %s", allowed, want)
	}
}

// markupOf is the page as its golden holds it: with placeholders for the
// inlined assets and the script's hash (checkAssets checks them).
func markupOf(t testing.TB, page []byte) []byte {
	t.Helper()
	s := string(page)
	checkAssets(t, s)
	if m := cspHash.FindStringSubmatchIndex(s); m != nil {
		s = s[:m[2]-len("sha256-")] + hashPlaceholder + s[m[3]:]
	}
	s = strings.Replace(s, "<style>"+assets.CSS+"</style>", "<style>"+cssPlaceholder+"</style>", 1)
	s = strings.Replace(s, "<script>"+assets.JS+"</script>", "<script>"+jsPlaceholder+"</script>", 1)
	s = strings.Replace(s, ` data-build="`+buildHash+`"`, ` data-build="BUILD"`, 1) // the assets' hash
	return []byte(s)
}

// The page goldens: the one-page fixture (load_data.csv as an older fetch
// wrote it, without Slurm and container columns), attrib.csv, whose
// processes run in Slurm jobs, Docker containers and Kubernetes pods,
// health.csv and vendors.csv (NVIDIA and AMD hosts, see TestGolden). Each
// holds the markup (markupOf); go test -update rewrites them.
func TestPageGolden(t *testing.T) {
	for _, tt := range []struct{ golden, csv, resv string }{
		{"page.html.golden", "testdata/load_data.csv", "testdata/reservations.json"},
		{"page-attrib.html.golden", "testdata/attrib.csv", ""},
		{"page-health.html.golden", "testdata/health.csv", ""},
		{"page-vendors.html.golden", "testdata/vendors.csv", ""},
	} {
		t.Run(tt.golden, func(t *testing.T) {
			var b bytes.Buffer
			if err := HTML(&b, testReport(t, readRows(t, tt.csv), tt.resv)); err != nil {
				t.Fatal(err)
			}
			testenv.Golden(t, filepath.Join("testdata", tt.golden), markupOf(t, b.Bytes()))
		})
	}
}

// Every page render writes inlines the style sheet and the script of
// assets/ whole, once, and allows that script alone: the one page, a
// group page and the overview of a fleet too big for one page.
func TestPageInlinesAssets(t *testing.T) {
	var one bytes.Buffer
	if err := HTML(&one, testReport(t, readRows(t, "testdata/load_data.csv"), "testdata/reservations.json")); err != nil {
		t.Fatal(err)
	}
	t.Run("one page", func(t *testing.T) { checkAssets(t, one.String()) })
	p := planPages(testReport(t, fleetRows(onePageHosts+1, 8), ""))
	if len(p.pages) == 0 {
		t.Fatal("no group pages")
	}
	t.Run("overview", func(t *testing.T) { checkAssets(t, string(p.index)) })
	t.Run("group page", func(t *testing.T) { checkAssets(t, string(p.pages[0].html)) })
	// a raw text element ends at its end tag, whatever is before it
	if strings.Contains(strings.ToLower(assets.CSS), "</style") {
		t.Error("assets/style.css holds </style")
	}
	if js := strings.ToLower(assets.JS); strings.Contains(js, "</script") || strings.Contains(js, "<!--") {
		t.Error("assets/page.js holds </script or <!--")
	}
}
