package render

import (
	"bufio"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/reservations"
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
		{"busy GPU of a reservation: its users", cluster.Busy, []*cluster.Proc{proc("bob", 1024)}, &reservations.Reservation{Name: "carol"},
			`<p class=u><b>bob</b> 1.0G`},
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

// A GPU that reports memory but no utilization (MIG) says why; a lost GPU
// and one with nothing known do not.
func TestCellSaysWhyNoUtilization(t *testing.T) {
	for _, tt := range []struct {
		name string
		g    cluster.GPU
		mig  bool
	}{
		{"MIG", cluster.GPU{MemUsed: loaddata.Num(11125), MemTotal: loaddata.Num(81559), State: cluster.Busy}, true},
		{"utilization known", cluster.GPU{MemUsed: loaddata.Num(1), MemTotal: loaddata.Num(81559), Util: loaddata.Num(0), State: cluster.Free}, false},
		{"lost", cluster.GPU{Error: "GPU is lost", State: cluster.Failed}, false},
		{"nothing known", cluster.GPU{State: cluster.Free}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cell := cellOf(&tt.g)
			if got := strings.Contains(cell, "<span class=mig>no util (MIG)</span>") && strings.Contains(cell, "<p class=n>"+migNote+"</p>"); got != tt.mig {
				t.Errorf("says MIG: %v, want %v\n%s", got, tt.mig, cell)
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
