package pagetest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumon/gpumon/internal/fetch"
	"github.com/gpumon/gpumon/internal/render"
	"github.com/gpumon/gpumon/internal/simfleet"
	"github.com/gpumon/gpumon/internal/testenv"
)

// The demo fleet (simfleet.Demo) holds a GPU of each kind of trouble;
// these tests run fetch and render over it, as cron would, and look at
// what a user is shown.
const (
	remapFailedGPU  = `.host[data-host="h200-b03"] .gpu[data-gpu="5"]` // remapped_rows.failure Yes
	xidGPU          = `.host[data-host="h200-b02"] .gpu[data-gpu="6"]` // XID 48 and 79
	degradedGPU     = `.host[data-host="h200-b01"] .gpu[data-gpu="6"]` // remap pending, ECC, hw_slowdown; alice's run
	sharedGPU       = `.host[data-host="h200-b02"] .gpu[data-gpu="0"]` // bob computes, alice holds 30 GB idle
	silentlyLostGPU = "bus db:00.0"                                    // h200-b06's: the driver lists it, nvidia-smi does not (readStatus's key)
)

// healthSite launches the demo fleet, runs fetch and render over it once
// and returns render's folder (index.html, status.json, metrics.prom) and
// what render -text printed.
func healthSite(t *testing.T) (www, text string) {
	t.Helper()
	t.Setenv("SSH_AUTH_SOCK", "") // only the fleet's own key
	dir := t.TempDir()
	f := testenv.StartFleet(t, simfleet.Demo())
	cf, err := f.WriteClientFiles(filepath.Join(dir, "fleet"))
	if err != nil {
		t.Fatal(err)
	}
	csv := filepath.Join(dir, "load_data.csv")
	www = filepath.Join(dir, "www")
	if err := os.Mkdir(www, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var stdout, stderr bytes.Buffer
	if err := fetch.Main(ctx, []string{"-c", cf.ConfigINI, "-o", csv}, &stdout, &stderr); err != nil {
		t.Fatalf("fetch: %v\n%s", err, &stderr)
	}
	if err := render.Main(ctx, []string{"-c", cf.ConfigINI, "-i", csv, "-o", filepath.Join(www, "index.html")}, &stdout, &stderr); err != nil {
		t.Fatalf("render: %v\n%s", err, &stderr)
	}
	stdout.Reset()
	if err := render.Main(ctx, []string{"-text", "-c", cf.ConfigINI, "-i", csv}, &stdout, &stderr); err != nil {
		t.Fatalf("render -text: %v\n%s", err, &stderr)
	}
	return www, stdout.String()
}

// statusGPU is what these tests read of a GPU in status.json.
type statusGPU struct {
	Index  *int
	BusID  string `json:"bus_id"`
	State  string
	Error  string
	Health *struct {
		State    string
		Findings []struct{ Condition, Severity, Detail string }
	}
	Processes []struct {
		PID   int64
		User  string
		SMPct *float64 `json:"sm_pct"`
	}
}

func readStatus(t *testing.T, www string) map[string]map[string]statusGPU {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(www, "status.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Hosts []struct {
			Name string
			GPUs []statusGPU
		}
	}
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	// host -> index, or "bus 9a:00.0" for a GPU without one -> GPU
	out := map[string]map[string]statusGPU{}
	for _, h := range st.Hosts {
		out[h.Name] = map[string]statusGPU{}
		for _, g := range h.GPUs {
			id := "bus " + strings.ToLower(g.BusID[max(0, len(g.BusID)-7):])
			if g.Index != nil {
				id = strconv.Itoa(*g.Index)
			}
			out[h.Name][id] = g
		}
	}
	return out
}

// conditions lists a GPU's health as "state: condition/severity ...".
func conditions(g statusGPU) string {
	if g.Health == nil {
		return "<no health>"
	}
	s := g.Health.State + ":"
	for _, f := range g.Health.Findings {
		s += " " + f.Condition + "/" + f.Severity
	}
	return s
}

// status.json and render -text tell each GPU's trouble: failed by a
// failed row remap, by XIDs 48 and 79, lost (the driver lists it,
// nvidia-smi does not); degraded by a pending remap, ECC errors and
// hardware slowdown, while alice's run goes on; a GPU of the old driver
// is fine; bob's share of the shared GPU and alice's idle one.
func TestHealthInStatusAndText(t *testing.T) {
	www, text := healthSite(t)
	st := readStatus(t, www)
	tests := []struct {
		host, gpu, state, health string
	}{
		{"h200-b03", "5", "failed", "failed: remap_failure/failed"},
		{"h200-b02", "6", "failed", "failed: recovery_action/failed xid_fatal/failed"},
		{"h200-b06", silentlyLostGPU, "failed", "failed: lost/failed"},
		{"h200-b04", "bus 9a:00.0", "failed", "failed: lost/failed"},
		{"h200-b01", "6", "busy", "degraded: remap_pending/degraded ecc_uncorrected/degraded hw_slowdown/degraded"},
		{"h200-b03", "4", "free", "ok:"},
		{"ws-c03", "0", "free", "ok:"},
	}
	for _, tt := range tests {
		g, ok := st[tt.host][tt.gpu]
		if !ok {
			t.Errorf("%s GPU %s: not in status.json (its GPUs: %v)", tt.host, tt.gpu, keys(st[tt.host]))
			continue
		}
		if g.State != tt.state || conditions(g) != tt.health {
			t.Errorf("%s GPU %s: state %q, health %q; want %q, %q", tt.host, tt.gpu, g.State, conditions(g), tt.state, tt.health)
		}
	}
	if xid := st["h200-b02"]["6"]; xid.Health != nil && len(xid.Health.Findings) > 1 && !strings.Contains(xid.Health.Findings[1].Detail, "48, 79") {
		t.Errorf("the XID GPU's xid_fatal finding says %q, want XIDs 48, 79", xid.Health.Findings[1].Detail)
	}
	sm := map[string]*float64{}
	for _, p := range st["h200-b02"]["0"].Processes {
		sm[p.User] = p.SMPct
	}
	if sm["bob"] == nil || *sm["bob"] != 90 {
		t.Errorf("bob's sm_pct on the shared GPU is %v, want 90", ptrString(sm["bob"]))
	}
	// pmon prints "-" for a process it has no sample of, as for
	// alice's, which launches nothing: on a GPU outside MIG that is 0 %
	if sm["alice"] == nil || *sm["alice"] != 0 {
		t.Errorf("alice's idle notebook has sm_pct %v, want 0 (pmon printed - for it: no sample)", ptrString(sm["alice"]))
	}
	for _, want := range []string{"h200-b03", "h200-b06", "remap", "lost"} {
		if !strings.Contains(text, want) {
			t.Errorf("render -text does not mention %q:\n%s", want, text)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func ptrString(f *float64) any {
	if f == nil {
		return "none"
	}
	return *f
}

// textOf is the innerText of the element that matches sel ("" if none).
func (tb *tab) textOf(sel string) string {
	tb.t.Helper()
	return eval[string](tb, `(document.querySelector(`+jsString(sel)+`) || {innerText: ""}).innerText`)
}

// hoverText hovers the cell, waits for its detail and returns the detail's text.
func (tb *tab) hoverText(cell string) string {
	tb.t.Helper()
	tb.hover(cell)
	tb.waitVisible(cell + aside)
	return tb.textOf(cell + aside)
}

// What a user sees of the demo fleet's troubles: a failed GPU grey with
// its reason in the cell and the hover, a degraded one marked apart from
// its state with its warning, the lost GPU the driver lists, the idle
// holder of a shared GPU named as such, and a host whose kernel log
// cannot be read said once, on its card.
func TestHealthOnThePage(t *testing.T) {
	www, _ := healthSite(t)
	tb := newTab(t, tabOptions{})
	tb.load(serve(t, www))
	tb.noProblems("loading the page")
	tb.screenshot("health-page.png", true)

	free, _ := tb.background(`.host[data-host="h200-b03"] .gpu[data-gpu="4"]`)
	for _, c := range []struct{ name, cell, why, detail string }{
		{"remap failure", remapFailedGPU, "row remapping failed", "row remapping failed: the GPU needs service"},
		// the driver's own verdict first (it lasts until a reset), then the XIDs
		{"XIDs", xidGPU, "the driver asks for recovery", "XID 48, 79 logged since the last poll"},
		{"lost", `.host[data-host="h200-b06"] .gpu[data-state="failed"]`, "the driver lists this GPU", "nvidia-smi does not report it"},
	} {
		if st := eval[string](tb, `(document.querySelector(`+jsString(c.cell)+`) || {dataset: {}}).dataset.state || ""`); st != "failed" {
			t.Errorf("%s: the cell's state is %q, want failed", c.name, st)
			continue
		}
		if bg, _ := tb.background(c.cell); !bg.greyish() || bg.distance(free) < 25 {
			t.Errorf("%s: the failed cell's background %v is not grey, or too close to free's %v", c.name, bg, free)
		}
		if why := tb.textOf(c.cell + " > .why"); !strings.Contains(why, c.why) {
			t.Errorf("%s: the cell says %q, want %q", c.name, why, c.why)
		}
		if d := tb.hoverText(c.cell); !strings.Contains(d, c.detail) {
			t.Errorf("%s: the hovered detail lacks %q:\n%s", c.name, c.detail, d)
		}
	}

	// The degraded GPU stays busy with alice's run, its warning in the
	// cell, a border that is not its state's, and each finding in the hover.
	if st := eval[string](tb, `document.querySelector(`+jsString(degradedGPU)+`).dataset.state`); st != "busy" {
		t.Errorf("the degraded GPU's state is %q, want busy", st)
	}
	if b := eval[string](tb, `getComputedStyle(document.querySelector(`+jsString(degradedGPU)+`)).borderLeftStyle`); b == eval[string](tb, `getComputedStyle(document.querySelector('.host[data-host="h200-b01"] .gpu[data-gpu="5"]')).borderLeftStyle`) {
		t.Errorf("the degraded GPU's left border (%s) is that of a healthy busy one", b)
	}
	tb.unhover()
	if !tb.isVisible(degradedGPU+" > .hl") || !strings.Contains(tb.textOf(degradedGPU+" > .hl"), "remap pending") {
		t.Errorf("the degraded GPU shows no warning in its cell: %q", tb.textOf(degradedGPU))
	}
	d := tb.hoverText(degradedGPU)
	for _, w := range []string{"alice", "row remapping is pending", "2 uncorrectable ECC errors", "hardware slowdown"} {
		if !strings.Contains(d, w) {
			t.Errorf("the degraded GPU's detail lacks %q:\n%s", w, d)
		}
	}
	tb.screenshot("health-degraded-hover.png", false)

	// The shared GPU: bob computes at 90 %, alice's share is idle.
	d = tb.hoverText(sharedGPU)
	if !strings.Contains(d, "bob") || !strings.Contains(d, "90%") || !regexp.MustCompile(`alice[^\n]*idle share`).MatchString(d) {
		t.Errorf("the shared GPU's detail does not show bob at 90%% and alice's idle share:\n%s", d)
	}
	tb.screenshot("health-shared-hover.png", false)

	if card := tb.textOf(`.host[data-host="ws-c01"]`); !strings.Contains(card, "kernel log unreadable") {
		t.Errorf("ws-c01's card does not say its kernel log cannot be read:\n%s", card)
	}
	if card := tb.textOf(`.host[data-host="ws-c03"]`); strings.Contains(card, "unreadable") || strings.Contains(card, "failed") {
		t.Errorf("the old driver's host says something is wrong:\n%s", card)
	}
	tb.noProblems("after the checks")
}
