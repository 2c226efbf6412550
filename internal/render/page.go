package render

import (
	"crypto/sha256"
	"encoding/base64"
	"html/template"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/gpumon/gpumon/assets"
	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/templates"
)

// The page is html/template all the way: every string from a host (process,
// user, host and GPU names, error texts) and from the reservations file is
// text, never markup. The script takes its data from data attributes only.
var pageTmpl = template.Must(template.ParseFS(templates.FS, "page.html"))

// csp allows the inline style and exactly the inline script of this build:
// even a bug in escaping could not run a script or load anything.
var csp = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-" +
	hash(assets.JS) + "'; base-uri 'none'; form-action 'none'"

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// commandMax is how much of a command line the page shows.
const commandMax = 100

// hostErrorMax is how much of a failed host's reason its card shows; the
// rest is in the card's detail.
const hostErrorMax = 300

// gpuErrorMax is how much of a lost GPU's error its cell shows.
const gpuErrorMax = 40

// modelsMax is how many models the summary names; the rest are "+N more".
const modelsMax = 6

type hostView struct {
	Name, Display, Info, Note string
	Down                      bool
	Status, Error, ErrorShort string
	Reservation               string
	GPUs                      []gpuView
}

type gpuView struct {
	State, StateText string
	Index            string
	Short            string
	Mem, MemUtil     string
	MemPct           int
	Sensors          string
	Why              string // a failed GPU's error, short
	IdleJob          bool   // idlemon's idle-time job runs here
	Notes            []string
	Procs            []procView
}

type procView struct {
	User, PID, Command, Mark, Mem, Time string
}

type modelView struct {
	Name        string
	Free, Total int
}

type moreModels struct {
	N, Free, Total int
}

type userView struct {
	Name, Mem, Hosts string
	GPUs, Procs      int
}

// HTML writes the status page.
func HTML(w io.Writer, r *Report) error {
	return pageTmpl.Execute(w, pageViewOf(r))
}

func pageViewOf(r *Report) map[string]any {
	c := r.Cluster
	cfg := r.Config
	v := map[string]any{
		"Title":          cfg.Title,
		"CSP":            csp,
		"CSS":            template.CSS(assets.CSS),
		"JS":             template.JS(assets.JS),
		"Refresh":        int(cfg.Refresh / time.Second),
		"RefreshText":    durText(cfg.Refresh),
		"DataTime":       "",
		"DataTimeText":   timeText(c.DataTime, r.Loc),
		"Generated":      timeText(r.Now, r.Loc),
		"StaleAfterS":    int(cfg.StaleAfter / time.Second),
		"StaleAfterText": durText(cfg.StaleAfter),
		"Stale":          r.Stale(),
		"Age":            ageText(r.Age()),
		"Free":           c.Count[cluster.Free],
		"Busy":           c.Count[cluster.Busy],
		"Reserved":       c.Count[cluster.Reserved],
		"Failed":         c.Count[cluster.Failed],
		"Total":          c.GPUs,
		"Hosts":          len(c.Hosts),
		"Down":           c.Down,
		"Models":         nil,
		"MoreModels":     nil,
		"Warnings":       r.Warnings,
		"JSONLink":       r.JSONLink,
		"PromLink":       r.PromLink,
	}
	if !c.DataTime.IsZero() {
		v["DataTime"] = c.DataTime.UTC().Format(time.RFC3339)
	}
	models, more := modelsView(c.Models)
	v["Models"] = models
	if more != nil {
		v["MoreModels"] = more
	}
	hosts := make([]hostView, 0, len(c.Hosts))
	for _, h := range c.Hosts {
		hv := hostView{Name: h.Name, Display: h.Display, Down: !h.Up(), Status: h.Status, Error: h.Error,
			ErrorShort: shorten(h.Error, hostErrorMax)}
		if hv.Display != h.Name {
			hv.Info = h.Name
		}
		if h.Up() {
			info := []string{}
			if hv.Info != "" {
				info = append(info, hv.Info)
			}
			if h.ModelName != "" {
				n := 0
				for _, g := range h.GPUs {
					if g.Name == h.ModelName {
						n++
					}
				}
				info = append(info, strconv.Itoa(n)+"× "+h.ModelName)
			}
			if h.Count[cluster.Free] > 0 {
				info = append(info, strconv.Itoa(h.Count[cluster.Free])+" free")
			}
			hv.Info = strings.Join(info, " · ")
			hv.Note = h.Error // an ok host's warnings
		} else {
			hv.Reservation = reservationText(h.Reserved, r.Loc)
		}
		hv.GPUs = make([]gpuView, 0, len(h.GPUs))
		for _, g := range h.GPUs {
			hv.GPUs = append(hv.GPUs, gpuViewOf(g, h, r))
		}
		hosts = append(hosts, hv)
	}
	v["HostList"] = hosts
	users := make([]userView, 0, len(c.Users))
	for _, u := range c.Users {
		users = append(users, userView{Name: userName(u.Name), GPUs: u.GPUs, Procs: u.Procs,
			Mem: gib(u.MemMiB) + " GiB", Hosts: strings.Join(u.Hosts, ", ")})
	}
	v["Users"] = users
	return v
}

var stateText = map[string]string{
	cluster.Free: "free", cluster.Busy: "busy", cluster.Reserved: "reserved", cluster.Failed: "failed",
}

func gpuViewOf(g *cluster.GPU, h *cluster.Host, r *Report) gpuView {
	gv := gpuView{State: g.State, StateText: stateText[g.State], Index: g.ID(), Short: g.Short,
		Mem: memText(g.MemUsed, g.MemTotal), MemPct: memPct(g.MemUsed, g.MemTotal), Sensors: sensors(g)}
	gv.MemUtil = gv.Mem
	if g.Util.Valid {
		gv.MemUtil += " · " + num(g.Util, "%")
	}
	if g.Name != h.ModelName && g.Name != "" {
		gv.Sensors = strings.TrimSuffix(g.Name+" · "+gv.Sensors, " · ")
	}
	if g.Error != "" {
		gv.Why = reasonText(g.Error, gpuErrorMax)
		gv.Notes = append(gv.Notes, g.Error)
	}
	gv.Notes = append(gv.Notes, g.Notes...)
	if s := reservationText(g.Reservation, r.Loc); s != "" {
		gv.Notes = append(gv.Notes, s)
	}
	for _, p := range g.Procs {
		pv := procView{User: userName(p.User), Command: shorten(p.Command, commandMax), Time: elapsedText(p.ElapsedS), Mem: "?"}
		if p.PID.Valid {
			pv.PID = strconv.FormatInt(p.PID.Value, 10)
		}
		if p.MemMiB.Valid {
			pv.Mem = gib(p.MemMiB.Value) + "G"
		}
		switch {
		case p.Preemptible:
			pv.Mark = "(idle-time job)"
			gv.IdleJob = true
		case p.Ignored:
			pv.Mark = "(ignored)"
		}
		gv.Procs = append(gv.Procs, pv)
	}
	return gv
}

// modelsView is the summary's models: the first modelsMax (the biggest),
// then the rest together.
func modelsView(ms []*cluster.Model) ([]modelView, *moreModels) {
	var out []modelView
	var more *moreModels
	for i, m := range ms {
		if i >= modelsMax && len(ms) > modelsMax {
			if more == nil {
				more = &moreModels{}
			}
			more.N++
			more.Free += m.Free
			more.Total += m.Total
			continue
		}
		out = append(out, modelView{Name: modelName(m.Name), Free: m.Free, Total: m.Total})
	}
	return out, more
}

// modelName names the model of GPUs whose model is not known.
func modelName(s string) string {
	if s == "" {
		return "unknown model"
	}
	return s
}
