package packaging

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/testenv"
)

// root is the repository's root, where make runs nfpm.
const root = "../.."

var packages = []string{"gpumon", "gpumon-idlemon"}

// sources returns the src: entries and script paths of dist/deb/NAME.yaml.
func sources(t *testing.T, name string) (srcs, scripts []string) {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "dist/deb", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	inScripts := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, " ") {
			inScripts = strings.HasPrefix(line, "scripts:")
			continue
		}
		key, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch {
		case key == "- src":
			srcs = append(srcs, val)
		case inScripts && val != "":
			scripts = append(scripts, val)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return srcs, scripts
}

// Every file a package description names is in the repository (or, for the
// binaries, is what make dist builds), and every maintainer script is an
// executable shell script.
func TestSourcesExist(t *testing.T) {
	for _, name := range packages {
		srcs, scripts := sources(t, name)
		if len(srcs) < 3 || len(scripts) != 3 {
			t.Fatalf("%s.yaml: %d sources and %d scripts: the parse is wrong", name, len(srcs), len(scripts))
		}
		for _, src := range srcs {
			if strings.Contains(src, "${ARCH}") {
				if !regexp.MustCompile(`^bin/linux-\$\{ARCH\}/(fetch|render|idlemon)$`).MatchString(src) {
					t.Errorf("%s.yaml: %s: only make dist's binaries depend on ARCH", name, src)
				}
				continue
			}
			m, err := filepath.Glob(filepath.Join(root, src))
			if err != nil || len(m) == 0 {
				t.Errorf("%s.yaml: %s: no such file in the repository", name, src)
			}
		}
		for _, s := range scripts {
			fi, err := os.Stat(filepath.Join(root, s))
			if err != nil {
				t.Errorf("%s.yaml: script %v", name, err)
				continue
			}
			if fi.Mode()&0o111 == 0 {
				t.Errorf("%s.yaml: script %s is not executable", name, s)
			}
			b, _ := os.ReadFile(filepath.Join(root, s))
			if !strings.HasPrefix(string(b), "#!/bin/sh\n") {
				t.Errorf("%s: not a #!/bin/sh script", s)
			}
			if strings.Contains(string(b), "systemctl enable") {
				t.Errorf("%s: a package must not enable its service", s)
			}
		}
	}
}

// debs builds the packages for this machine's architecture once per test
// binary, with `make deb ARCHES=GOARCH` as a user would: the test checks what
// this tree builds, never a .deb left in bin/ by an older one.
var debs struct {
	once  sync.Once
	start time.Time
	out   []byte
	err   error
}

// debFile returns bin/NAME_*_ARCH.deb as make deb just built it for this
// machine's architecture. Without make or dpkg-deb the test stops (a failure
// under CI).
func debFile(t *testing.T, name string) string {
	t.Helper()
	for _, prog := range []string{"make", "dpkg-deb", "git"} {
		if _, err := exec.LookPath(prog); err != nil {
			testenv.Need(t, "building and reading the .deb files needs "+prog)
		}
	}
	debs.once.Do(func() {
		debs.start = time.Now()
		cmd := exec.Command("make", "-C", root, "deb", "ARCHES="+runtime.GOARCH)
		debs.out, debs.err = cmd.CombinedOutput()
	})
	if debs.err != nil {
		t.Fatalf("make deb ARCHES=%s: %v\n%s", runtime.GOARCH, debs.err, debs.out)
	}
	m, _ := filepath.Glob(filepath.Join(root, "bin", name+"_*_"+runtime.GOARCH+".deb"))
	sort.Slice(m, func(i, j int) bool { return modTime(m[i]) > modTime(m[j]) })
	if len(m) == 0 || modTime(m[0]) < debs.start.Add(-time.Second).UnixNano() {
		t.Fatalf("make deb ARCHES=%s wrote no new bin/%s_*_%s.deb:\n%s", runtime.GOARCH, name, runtime.GOARCH, debs.out)
	}
	return m[0]
}

func modTime(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.ModTime().UnixNano()
}

func dpkgDeb(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("dpkg-deb", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg-deb %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// contents maps each path of dpkg-deb -c's listing ("/usr/bin/fetch") to
// its mode and owner ("-rwxr-xr-x root/root").
func contents(t *testing.T, deb string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(dpkgDeb(t, "-c", deb)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("dpkg-deb -c: odd line %q", line)
		}
		got[strings.TrimPrefix(f[len(f)-1], ".")] = f[0] + " " + f[1]
	}
	return got
}

var debVersion = regexp.MustCompile(`^[0-9][A-Za-z0-9.+~]*$`)

func TestDebContents(t *testing.T) {
	const (
		exe  = "-rwxr-xr-x root/root"
		file = "-rw-r--r-- root/root"
	)
	for _, c := range []struct {
		name      string
		files     map[string]string
		conffiles []string
		binaries  []string
	}{
		{"gpumon", map[string]string{
			"/usr/bin/fetch":  exe,
			"/usr/bin/render": exe,
			"/usr/lib/systemd/system/gpumon-live.service":    file,
			"/etc/gpumon/config.ini":                         file,
			"/usr/share/doc/gpumon/copyright":                file,
			"/usr/share/doc/gpumon/config.example.ini":       file,
			"/usr/share/doc/gpumon/README.md":                file,
			"/usr/share/doc/gpumon/docs/deployment.md":       file,
			"/usr/share/gpumon/prometheus/gpumon.rules.yml":  file,
			"/usr/share/gpumon/prometheus/gpumon.alerts.yml": file,
		}, []string{"/etc/gpumon/config.ini"}, []string{"fetch", "render"}},
		{"gpumon-idlemon", map[string]string{
			"/usr/bin/idlemon":                                  exe,
			"/usr/lib/systemd/system/idlemon.service":           file,
			"/usr/share/doc/gpumon-idlemon/copyright":           file,
			"/usr/share/doc/gpumon-idlemon/idlemon.example.ini": file,
			"/usr/share/doc/gpumon-idlemon/idlemon.md":          file,
		}, nil, []string{"idlemon"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			deb := debFile(t, c.name)
			got := contents(t, deb)
			for path, mode := range c.files {
				if got[path] != mode {
					t.Errorf("%s: %s: got %q, want %q", deb, path, got[path], mode)
				}
			}
			for path, mode := range got {
				if !strings.HasPrefix(path, "/usr/") && !strings.HasPrefix(path, "/etc/gpumon/") && path != "/etc/" {
					t.Errorf("%s: %s: outside /usr and /etc/gpumon", deb, path)
				}
				if !strings.HasSuffix(mode, " root/root") {
					t.Errorf("%s: %s: owned by %s, want root/root", deb, path, mode)
				}
			}

			info := dpkgDeb(t, "-f", deb, "Package", "Architecture", "Version", "Maintainer")
			fields := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(info), "\n") {
				k, v, _ := strings.Cut(line, ": ")
				fields[k] = v
			}
			if fields["Package"] != c.name || fields["Architecture"] != runtime.GOARCH {
				t.Errorf("%s: Package %q, Architecture %q", deb, fields["Package"], fields["Architecture"])
			}
			if !debVersion.MatchString(fields["Version"]) {
				t.Errorf("%s: Version %q is not a Debian version without revision", deb, fields["Version"])
			}
			if fields["Maintainer"] == "" {
				t.Errorf("%s: no Maintainer", deb)
			}

			control := t.TempDir()
			dpkgDeb(t, "-e", deb, control)
			conf, _ := os.ReadFile(filepath.Join(control, "conffiles"))
			if got := strings.Fields(string(conf)); strings.Join(got, " ") != strings.Join(c.conffiles, " ") {
				t.Errorf("%s: conffiles %q, want %q", deb, got, c.conffiles)
			}
			post, err := os.ReadFile(filepath.Join(control, "postinst"))
			if err != nil {
				t.Fatalf("%s: no postinst: %v", deb, err)
			}
			if c.name == "gpumon" && !strings.Contains(string(post), "useradd --system") {
				t.Errorf("%s: the postinst makes no gpumon user", deb)
			}

			// The binaries run here and say the version they were stamped
			// with, not "dev".
			fs := t.TempDir()
			dpkgDeb(t, "-x", deb, fs)
			for _, prog := range c.binaries {
				out, err := exec.Command(filepath.Join(fs, "usr/bin", prog), "-version").CombinedOutput()
				line := strings.TrimSpace(string(out))
				if err != nil || !strings.HasPrefix(line, prog+" ") || strings.HasPrefix(line, prog+" dev") {
					t.Errorf("%s: %s -version: %q, %v; want %s and the git describe version", deb, prog, line, err, prog)
				}
			}
		})
	}
}
