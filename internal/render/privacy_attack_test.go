package render

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
)

// A key the web server could serve, or that others could read or plant,
// is refused; so is a file render would wait on or read without end. Each
// case is one a tired admin makes: a web root that is a link to the
// data folder, a key copied in with the umask's 0644, a key at the path
// of a shared folder that someone else made first, a fifo, /dev/zero.
func TestPseudonymKeyRefused(t *testing.T) {
	good := make([]byte, pseudonymKeySize)
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) *Config // the config whose key is refused
		want  string
	}{
		{"web root linked to the data folder", func(t *testing.T, dir string) *Config {
			// /var/www/gpumon -> /var/lib/gpumon, the CSV and the key in it
			if err := os.Symlink(filepath.Join(dir, "data"), filepath.Join(dir, "www")); err != nil {
				t.Fatal(err)
			}
			return keyConfig(dir, "")
		}, "in the page's folder"},
		{"key a link into the web root", func(t *testing.T, dir string) *Config {
			os.Mkdir(filepath.Join(dir, "www"), 0o755)
			os.WriteFile(filepath.Join(dir, "www", "k"), good, 0o600)
			os.Symlink(filepath.Join(dir, "www", "k"), filepath.Join(dir, "data", DefaultPseudonymKey))
			return keyConfig(dir, "")
		}, "in the page's folder"},
		{"readable by others", func(t *testing.T, dir string) *Config {
			os.WriteFile(filepath.Join(dir, "data", DefaultPseudonymKey), good, 0o644)
			os.Chmod(filepath.Join(dir, "data", DefaultPseudonymKey), 0o644) // whatever the umask
			return keyConfig(dir, "")
		}, "others may read or replace it"},
		{"another account's", func(t *testing.T, dir string) *Config {
			if os.Geteuid() != 0 {
				t.Skip("only root gives a file away") // CI runs as root
			}
			p := filepath.Join(dir, "data", DefaultPseudonymKey)
			os.WriteFile(p, good, 0o600)
			if err := os.Chown(p, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return keyConfig(dir, "")
		}, "owned by uid 65534"},
		{"a fifo", func(t *testing.T, dir string) *Config {
			if err := syscall.Mkfifo(filepath.Join(dir, "data", DefaultPseudonymKey), 0o600); err != nil {
				t.Fatal(err)
			}
			return keyConfig(dir, "")
		}, "not a regular file"},
		{"too long", func(t *testing.T, dir string) *Config {
			os.WriteFile(filepath.Join(dir, "data", DefaultPseudonymKey), make([]byte, 1<<20), 0o600)
			return keyConfig(dir, "")
		}, "longer, want 32 bytes"},
		{"a device", func(t *testing.T, dir string) *Config {
			return keyConfig(dir, "/dev/zero")
		}, "not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			os.Mkdir(filepath.Join(dir, "data"), 0o755)
			cfg := tt.setup(t, dir)
			done := make(chan error, 1)
			go func() { _, err := pseudonymKey(cfg); done <- err }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("error %v, want one with %q", err, tt.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("render waits on the key file")
			}
		})
	}
}

// keyConfig is a config with users hidden, its CSV in dir/data and its
// page in dir/www; key, if not "", is [render] pseudonym_key.
func keyConfig(dir, key string) *Config {
	cfg := DefaultConfig()
	cfg.Input = filepath.Join(dir, "data", "load_data.csv")
	cfg.HTML = filepath.Join(dir, "www", "index.html")
	cfg.Users = UsersHide
	cfg.PseudonymKey = key
	return cfg
}

// The page's warnings are published too: a history kept under the home
// of the user who set gpumon up names them in its path when it cannot be
// read, as a config file in their home does in a [teams] problem.
func TestPrivacyHidesWarnings(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"www", "data", "home/zelda"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	ini := filepath.Join(dir, "home/zelda/gpumon.ini")
	os.WriteFile(ini, []byte("[render]\ninput = "+filepath.Join(dir, "data/load_data.csv")+"\nhtml = "+filepath.Join(dir, "www/index.html")+
		"\nusers = hide\n[history]\ndb = "+filepath.Join(dir, "home/zelda/none/history.db")+"\n"), 0o644)
	at := time.Date(2026, 11, 23, 14, 0, 0, 0, time.UTC)
	if err := loaddata.WriteFile(filepath.Join(dir, "data/load_data.csv"), privacyFleet(at)[:64]); err != nil {
		t.Fatal(err)
	}
	_, stderr, _ := renderMainAt(t, func() time.Time { return at.Add(20 * time.Second) }, "-c", ini)
	page, err := os.ReadFile(filepath.Join(dir, "www/index.html"))
	if err != nil {
		t.Fatalf("no page: %v\n%s", err, stderr)
	}
	if !strings.Contains(string(page), "History (") {
		t.Fatalf("the page has no history warning: the test tests nothing\n%s", stderr)
	}
	files := map[string]string{}
	for _, f := range []string{"index.html", "status.json", "index.txt"} {
		b, _ := os.ReadFile(filepath.Join(dir, "www", f))
		files[f] = string(b)
	}
	if l := leaks(files, secretUsers); len(l) > 0 {
		t.Errorf("%d hidden names published, first: %s", len(l), l[0])
	}
}

// A name with digits after it is the name still: job names, folders and
// containers number their runs (zelda2024-finetune, /scratch/zelda2/,
// yorick.vance01). A name inside a longer word stays (ann in annex).
func TestNameFinderNumberedRuns(t *testing.T) {
	names := map[string]string{"zelda": "Z", "ann": "A", "user0": "U0", "user01": "U01"}
	f := newNameFinder([]string{"zelda", "ann", "user0", "user01"})
	for in, want := range map[string]string{
		"zelda2024-finetune":     "Z2024-finetune",
		"/scratch/zelda2/run.py": "/scratch/Z2/run.py",
		"annex ann3 3ann":        "annex A3 3ann",
		"user01 user02":          "U01 U02",
	} {
		if got := f.replace(in, names); got != want {
			t.Errorf("replace(%q) = %q, want %q", in, got, want)
		}
	}
}

// Every text of a process a user chooses is scrubbed of user names: a
// partition is as often named after its lab's head as an account is
// (gpu-zelda). The ids (job, container, pod) are numbers and hex.
func TestPrivacyScrubsEveryProcessText(t *testing.T) {
	ids := map[string]bool{"SlurmJob": true, "Container": true, "Pod": true}
	row := loaddata.Row{Timestamp: "2026-11-23T14:05:00Z", Host: "gpu01", HostStatus: hoststatus.OK,
		GPUIndex: loaddata.IntOf(0), GPUName: "NVIDIA H100", MemUsedMiB: loaddata.Num(5000), MemTotalMiB: loaddata.Num(81920),
		PID: loaddata.IntOf(7), ProcessMemMiB: loaddata.Num(4000), User: "zelda"}
	rv := reflect.ValueOf(&row).Elem()
	for _, f := range []string{"Command", "SlurmJobName", "SlurmPartition", "SlurmAccount", "ContainerName"} {
		rv.FieldByName(f).SetString("gpu-zelda")
	}
	rep := testReport(t, []loaddata.Row{row}, "")
	p := &privacy{commands: CommandsShow, key: make([]byte, pseudonymKeySize), names: map[string]string{}, done: map[string]string{}}
	proc := p.apply(rep).Cluster.Hosts[0].GPUs[0].Procs[0]
	pv := reflect.ValueOf(proc).Elem()
	for i := 0; i < pv.NumField(); i++ {
		f := pv.Type().Field(i)
		if f.Type.Kind() == reflect.String && !ids[f.Name] && strings.Contains(pv.Field(i).String(), "zelda") {
			t.Errorf("Proc.%s published as %q", f.Name, pv.Field(i).String())
		}
	}
}

// commands = program: a Linux command line whose arguments hold a
// backslash and ".exe" shows its program, not the argument's tail.
func TestProgramNameArgumentsStayHidden(t *testing.T) {
	for in, want := range map[string]string{
		`/usr/bin/python train.py --out C:\tmp\S3CRET.exe`:            "python",
		`python train.py --sep a\b --token S3CRET x.exe`:              "python",
		`C:\Program Files\App\app.exe --flag`:                         "app.exe",
		`"C:\Program Files\App\app.exe" --token S3CRET`:               "app.exe",
		`\\server\share\tools\run.EXE --token S3CRET`:                 "run.EXE",
		`D:/envs/py/python.exe C:\Users\zelda\S3CRET.exe --key x.exe`: "python.exe",
	} {
		if got := programName(in); got != want {
			t.Errorf("programName(%q) = %q, want %q", in, got, want)
		}
	}
}
