package render

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/loaddata"
)

// The secrets of the privacy fleet: user names (one with a dot, one that
// only reserves, one only in a team), and what a command line, a job or
// a container name may carry.
var (
	secretUsers    = []string{"zelda", "yorick.vance", "mallory_x", "Quentinus"}
	secretCommands = []string{"S3CRETKEY", "secret_project", "--wandb-key", "train.py"}
)

// privacyFleet is attributedFleetRows of 240 hosts (more than one page
// holds: group pages are written too) with the secret users, their names
// in the commands, job and container names, and the GPUs of gpu0007
// held idle.
func privacyFleet(at time.Time) []loaddata.Row {
	rows := attributedFleetRows(240, 8)
	for i := range rows {
		r := &rows[i]
		r.Timestamp = at.UTC().Format(time.RFC3339)
		if r.Host == "gpu0005" { // an ok host's warning, in its card
			r.HostError = "ps: /home/zelda/.cache: permission denied"
		}
		if !r.PID.Valid {
			continue
		}
		u := secretUsers[i%3]
		if r.User != "root" {
			r.User = u
		}
		r.Command = "/home/" + u + "/venv/bin/python3 -u /home/" + u + "/secret_project/train.py --wandb-key=S3CRETKEY"
		if r.SlurmJobName != "" {
			r.SlurmJobName = u + "-finetune"
			r.SlurmAccount = "lab_" + u
		}
		if r.ContainerName != "" {
			r.ContainerName = strings.ToUpper(u[:1]) + u[1:] + ".dev"
		}
		if r.Host == "gpu0007" {
			r.GPUUtilPct = loaddata.Num(0)
		}
	}
	return rows
}

// privacySite renders the privacy fleet three times, five minutes apart
// (the history counts hours and idle-held spells), with the settings of
// extra, and returns every file render wrote but the history and the key.
func privacySite(t *testing.T, extra string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"www", "data"} {
		os.Mkdir(filepath.Join(dir, d), 0o755)
	}
	os.WriteFile(filepath.Join(dir, "data", "reservations.json"), []byte(`{
  "gpu0003": [{"name": "Quentinus", "comment": "for zelda's deadline", "gpus": [1]}],
  "gpu0004": [{"name": "mallory_x"}]
}`), 0o644)
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[render]\ninput = data/load_data.csv\nhtml = www/index.html\nreservations = data/reservations.json\n"+extra+
		"\n[history]\ndb = data/history.db\nidle_after = 5m\n"+
		"[teams]\nvision = zelda, yorick.vance\nnlp = mallory_x, Quentinus\n[team_leads]\nnlp = Quentinus\n"), 0o644)
	csv := filepath.Join(dir, "data", "load_data.csv")
	start := time.Date(2026, 11, 23, 14, 0, 0, 0, time.UTC)
	for m := 0; m <= 10; m += 5 {
		at := start.Add(time.Duration(m) * time.Minute)
		if err := loaddata.WriteFile(csv, privacyFleet(at)); err != nil {
			t.Fatal(err)
		}
		if _, stderr, err := renderMainAt(t, func() time.Time { return at.Add(20 * time.Second) }, "-c", ini); err != nil {
			t.Fatalf("render: %v\n%s", err, stderr)
		}
	}
	files := map[string]string{}
	filepath.WalkDir(filepath.Join(dir, "www"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(path)
			rel, _ := filepath.Rel(dir, path)
			files[rel] = string(b)
		}
		return nil
	})
	for _, want := range []string{"www/index.html", "www/status.json", "www/metrics.prom", "www/groups/gpu.html", "www/page-state.json", "www/index.txt", "www/free.txt"} {
		if files[want] == "" {
			t.Fatalf("render wrote no %s (wrote %d files)", want, len(files))
		}
	}
	return files
}

// leaks lists where any of secrets, in any letter case, is in files.
func leaks(files map[string]string, secrets []string) []string {
	var out []string
	for name, body := range files {
		low := strings.ToLower(body)
		for _, s := range secrets {
			if i := strings.Index(low, strings.ToLower(s)); i >= 0 {
				out = append(out, name+": "+s+" in …"+body[max(0, i-40):min(len(body), i+40)]+"…")
			}
		}
	}
	return out
}

// No hidden value reaches any published file: not a user name (in the
// cells, the users table, the plots, the idle-held list, the teams, the
// reservations, status.json's and metrics.prom's labels), not a command's
// arguments; and the same user has the same pseudonym in every file.
func TestPrivacyHidesEverywhere(t *testing.T) {
	files := privacySite(t, "users = hide\ncommands = program\n")
	if l := leaks(files, append(secretUsers, secretCommands...)); len(l) > 0 {
		t.Errorf("%d hidden values published, first ones:\n%s", len(l), strings.Join(l[:min(len(l), 12)], "\n"))
	}
	pseudo := regexp.MustCompile(`user-[0-9a-f]{8}`)
	seen := map[string]map[string]bool{}
	for name, body := range files {
		for _, p := range pseudo.FindAllString(body, -1) {
			if seen[p] == nil {
				seen[p] = map[string]bool{}
			}
			seen[p][name] = true
		}
	}
	// three users hold GPUs, one reserves; a fifth would be a pseudonym
	// that differs between files
	if len(seen) != 4 {
		t.Errorf("%d pseudonyms in the files, want 4 (3 users holding GPUs, 1 reserving): %v", len(seen), seen)
	}
	for _, f := range []string{"www/index.html", "www/status.json", "www/metrics.prom", "www/groups/gpu.html", "www/index.txt"} {
		n := 0
		for _, in := range seen {
			if in[f] {
				n++
			}
		}
		if n == 0 {
			t.Errorf("%s shows no pseudonym: the users are hidden, not named", f)
		}
	}
	if !strings.Contains(files["www/status.json"], `"privacy":{"commands":"program","users":"hide"}`) {
		t.Errorf("status.json does not say what is hidden")
	}
	for _, f := range []string{"www/index.html", "www/groups/gpu.html"} {
		if !strings.Contains(files[f], "commands shown as program names only; user names replaced by pseudonyms") {
			t.Errorf("%s does not say what it hides", f)
		}
	}
	if !strings.Contains(files["www/groups/gpu.html"], "<td>python3") {
		t.Errorf("commands = program: the group page shows no program name")
	}
}

// What is shown stays shown: the test above cannot pass by writing
// nothing. With commands hidden and users shown, the names are there and
// no command is.
func TestPrivacyShownAndHidden(t *testing.T) {
	t.Run("all shown", func(t *testing.T) {
		files := privacySite(t, "")
		for _, s := range append(secretUsers, secretCommands...) {
			if len(leaks(files, []string{s})) == 0 {
				t.Errorf("%q is in no file with everything shown: the fleet does not test it", s)
			}
		}
	})
	t.Run("commands hidden", func(t *testing.T) {
		files := privacySite(t, "commands = hide\n")
		if l := leaks(files, append(secretCommands, "python")); len(l) > 0 {
			t.Errorf("commands = hide: %d published, first: %s", len(l), l[0])
		}
		if len(leaks(map[string]string{"page": files["www/groups/gpu.html"]}, []string{"zelda"})) == 0 {
			t.Errorf("commands = hide hid the users too")
		}
	})
}

// The key: made once (0600, beside the CSV), then the same pseudonyms;
// refused in the page's folder, where nginx would serve it, or when it is
// not a key; a render without its key writes nothing.
func TestPseudonymKey(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.Input = filepath.Join(dir, "data", "load_data.csv")
	cfg.HTML = filepath.Join(dir, "www", "index.html")
	cfg.Users = UsersHide
	os.Mkdir(filepath.Join(dir, "data"), 0o755)
	k1, err := pseudonymKey(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "data", DefaultPseudonymKey))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600 beside the CSV", err, fi.Mode())
	}
	if k2, _ := pseudonymKey(cfg); string(k1) != string(k2) || pseudonym(k1, "alice") != pseudonym(k2, "alice") {
		t.Errorf("the second run's key differs: pseudonyms would change")
	}
	if pseudonym(k1, "alice") == pseudonym(make([]byte, 32), "alice") {
		t.Errorf("the pseudonym does not depend on the key")
	}
	for _, c := range []struct{ name, key, setup, want string }{
		{"in the web root", "www/pseudonym.key", "", "in the page's folder"},
		{"below the web root", "www/groups/k", "", "in the page's folder"},
		{"too short", "short.key", "abc", "3 bytes, want 32"},
		{"no folder", "none/k", "", "no such file or directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg.PseudonymKey = filepath.Join(dir, c.key)
			if c.setup != "" {
				os.WriteFile(cfg.PseudonymKey, []byte(c.setup), 0o600)
			}
			_, err := pseudonymKey(cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one with %q", err, c.want)
			}
		})
	}
}

func TestNameFinder(t *testing.T) {
	names := map[string]string{"ann": "A", "ann.lee": "AL", "bob": "B", "ml": "M"}
	f := newNameFinder([]string{"ann", "ann.lee", "bob", "ml"})
	for in, want := range map[string]string{
		"/home/ann/train.py":        "/home/A/train.py",
		"ann.lee-run ann.leex":      "AL-run A.leex",
		"Bob_dev BOB bobby alibob":  "B_dev B bobby alibob",
		"html ml/x":                 "html M/x",
		"":                          "",
		"naïve ann":                 "naïve A",
		"\u0130ann ann":             "\u0130ann A", // a rune whose lower case is longer
		"no names here, just words": "no names here, just words",
	} {
		if got := f.replace(in, names); got != want {
			t.Errorf("replace(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestProgramName(t *testing.T) {
	for in, want := range map[string]string{
		"/opt/conda/bin/python -u train.py --key x": "python",
		"python eval.py":                      "python",
		`C:\Program Files\App\app.exe --flag`: "app.exe",
		"./gpu_burn 60":                       "gpu_burn",
		"":                                    "",
	} {
		if got := programName(in); got != want {
			t.Errorf("programName(%q) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkPrivacy: the copy that users = hide and commands = program
// make of a 1000-host report with a month of history, before any file is
// written; compare with BenchmarkRender/command.
func BenchmarkPrivacy(b *testing.B) {
	rep := testReport(b, attributedFleetRows(1000, 8), "")
	rep.History = benchSummary(1000, 8, rep.Cluster.DataTime)
	key := make([]byte, pseudonymKeySize)
	for b.Loop() {
		p := &privacy{commands: CommandsProgram, key: key, names: map[string]string{}, done: map[string]string{}}
		if out := p.apply(rep); out.Cluster == rep.Cluster {
			b.Fatal("nothing copied")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/run")
}
