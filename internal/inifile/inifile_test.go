package inifile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func read(t testing.TB, src string) *File {
	t.Helper()
	f, err := Read(strings.NewReader(src), "/etc/x/f.ini")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestLineIndex(t *testing.T) {
	src := "stray = 1\n; comment\n[common]\nUser = alice\nhosts = a,\n  b\n# hosts = again\n\n[render]\ntitle: Lab\nuser = x\nuser = y\n" +
		"[host_names]\n\"gpu02:2222\" = GPU 2\r\n[common]\n" +
		"[ spaced ] ; a comment after the header\n  indented = 1\n" + // 16, 17
		"slash = a \\\n  b\nafter_slash = 2\n" + // 18-20
		"quoted = \"\"\"one\ntwo = not a key\nthree\"\"\"\nafter_quote = 3\n" + // 21-24
		"empty =\n  continued: not a key\n\n  key_again = 4\n" // 25-28
	want := map[string]int{
		" spaced .":             16,
		" spaced .indented":     17,
		" spaced .slash":        18,
		" spaced .after_slash":  20,
		" spaced .quoted":       21,
		" spaced .after_quote":  24,
		" spaced .empty":        25,
		" spaced .key_again":    28,
		"DEFAULT.stray":         1,
		"common.":               3,
		"common.user":           4,
		"common.hosts":          5,
		"render.":               9,
		"render.title":          10,
		"render.user":           12, // the last one, whose value is kept
		"host_names.":           13,
		"host_names.gpu02:2222": 14,
	}
	if diff := cmp.Diff(want, lineIndex([]byte(src))); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// and ini.v1 reads the same keys from it
	keys := read(t, src).Section(" spaced ").Keys()
	if diff := cmp.Diff([]string{"indented", "slash", "after_slash", "quoted", "after_quote", "empty", "key_again"}, keys); diff != "" {
		t.Errorf("ini.v1's keys (-want +got):\n%s", diff)
	}
}

// Notepad starts a file with a byte order mark; ini.v1 skips it, and so
// must the line index.
func TestByteOrderMark(t *testing.T) {
	f := read(t, "\xef\xbb\xbf[common]\nn = x\n")
	if got := f.ErrorAt("common", "", "m").Line; got != 1 {
		t.Errorf("[common] at line %d, want 1", got)
	}
}

// A repeated key: the value kept and the line an error names are the same.
func TestRepeatedKeyPointsAtTheValueKept(t *testing.T) {
	f := read(t, "[a]\nn = 1\nn = x\n")
	n := 0
	err := f.Section("a").Int("n", Limits[int]{}, &n)
	if err == nil || err.Error() != `/etc/x/f.ini:3: n: "x" is not a whole number of at least 0` {
		t.Errorf("got %v", err)
	}
}

// A line longer than bufio.Scanner's limit must not hide the lines after it.
func TestLongLine(t *testing.T) {
	f := read(t, "[a]\nhosts = "+strings.Repeat("gpu1,", 400000)+"\nn = x\n")
	n := 0
	err := f.Section("a").Int("n", Limits[int]{}, &n)
	if err == nil || !strings.HasPrefix(err.Error(), "/etc/x/f.ini:3: n: ") {
		t.Errorf("got %v", err)
	}
}

func TestReadRefusesHugeInput(t *testing.T) {
	_, err := Read(strings.NewReader(strings.Repeat("#\n", maxSize)), "big.ini")
	if err == nil || err.Error() != "big.ini: larger than 16 MiB: not a config file" {
		t.Errorf("got %v", err)
	}
}

func TestOpenMissingFile(t *testing.T) {
	if _, err := Open(filepath.Join(t.TempDir(), "none.ini")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("got %v, want a not-exist error", err)
	}
}

// Each getter, at its limits, on line 3 of a file.
func TestGetters(t *testing.T) {
	secs := Limits[time.Duration]{Min: time.Nanosecond, Max: time.Hour, Want: "a number of seconds above 0, at most 3600"}
	for _, tc := range []struct {
		name, value string
		get         func(Section) (any, error)
		want        any    // when no error
		wantErr     string // the whole message
	}{
		{"int", "64", intIn(Limits[int]{Min: 1}), 64, ""},
		{"int at min", "1", intIn(Limits[int]{Min: 1}), 1, ""},
		{"int below min", "0", intIn(Limits[int]{Min: 1}), nil, `f.ini:3: k: "0" is not a whole number of at least 1`},
		{"int at max", "10", intIn(Limits[int]{Min: 1, Max: 10}), 10, ""},
		{"int above max", "11", intIn(Limits[int]{Min: 1, Max: 10}), nil, `f.ini:3: k: "11" is not a whole number from 1 to 10`},
		{"int, not a number", "many", intIn(Limits[int]{Want: "a count"}), nil, `f.ini:3: k: "many" is not a count`},
		{"int, a fraction", "1.5", intIn(Limits[int]{}), nil, `f.ini:3: k: "1.5" is not a whole number of at least 0`},

		{"float", "512.5", floatIn(Limits[float64]{}), 512.5, ""},
		{"float NaN", "NaN", floatIn(Limits[float64]{Want: "a number of MiB"}), nil, `f.ini:3: k: "NaN" is not a number of MiB`},
		{"float below min", "-1", floatIn(Limits[float64]{}), nil, `f.ini:3: k: "-1" is not a number of at least 0`},

		{"seconds", "20", secondsIn(secs), 20 * time.Second, ""},
		{"seconds with s", "7.5s", secondsIn(secs), 7500 * time.Millisecond, ""},
		{"seconds, exponent", "1e1s", secondsIn(secs), 10 * time.Second, ""},
		{"seconds at max", "3600", secondsIn(secs), time.Hour, ""},
		{"seconds above max", "3601", secondsIn(secs), nil, `f.ini:3: k: "3601" is not a number of seconds above 0, at most 3600`},
		{"seconds at 0, min above", "0", secondsIn(secs), nil, `f.ini:3: k: "0" is not a number of seconds above 0, at most 3600`},
		{"seconds below a nanosecond", "1e-10", secondsIn(secs), nil, `f.ini:3: k: "1e-10" is not a number of seconds above 0, at most 3600`},
		{"seconds NaN", "nan", secondsIn(secs), nil, `f.ini:3: k: "nan" is not a number of seconds above 0, at most 3600`},
		{"seconds, no units", "5m", secondsIn(secs), nil, `f.ini:3: k: "5m" is not a number of seconds above 0, at most 3600`},
		{"seconds, a millisecond exactly", "0.001", secondsIn(Limits[time.Duration]{Min: time.Millisecond}), time.Millisecond, ""},
		{"seconds, default message", "-1", secondsIn(Limits[time.Duration]{}), nil, `f.ini:3: k: "-1" is not a number of seconds of at least 0s`},

		{"duration in seconds", "900", durationIn(Limits[time.Duration]{}), 15 * time.Minute, ""},
		{"duration with units", "1h30m", durationIn(Limits[time.Duration]{}), 90 * time.Minute, ""},
		{"duration in ms", "500ms", durationIn(Limits[time.Duration]{}), 500 * time.Millisecond, ""},
		{"duration, negative", "-5m", durationIn(Limits[time.Duration]{}), nil, `f.ini:3: k: "-5m" is not a duration of at least 0s`},
		{"duration beyond time.Duration", "1e12", durationIn(Limits[time.Duration]{}), nil, `f.ini:3: k: "1e12" is not a duration of at least 0s`},
		{"duration, garbage", "soon", durationIn(Limits[time.Duration]{Want: "a duration (e.g. 900, 900s or 15m)"}), nil, `f.ini:3: k: "soon" is not a duration (e.g. 900, 900s or 15m)`},

		{"bool yes", "Yes", boolean, true, ""},
		{"bool on", "on", boolean, true, ""},
		{"bool 0", "0", boolean, false, ""},
		{"bool OFF", "OFF", boolean, false, ""},
		{"bool maybe", "maybe", boolean, nil, `f.ini:3: k: "maybe" is not a boolean (true/false, yes/no, on/off, 1/0)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Read(strings.NewReader("[s]\n\nK = "+tc.value+"\n"), "f.ini")
			if err != nil {
				t.Fatal(err)
			}
			got, err := tc.get(f.Section("s"))
			if tc.wantErr != "" {
				var e *Error
				if !errors.As(err, &e) || err.Error() != tc.wantErr {
					t.Fatalf("got %v (%T), want *Error %q", err, err, tc.wantErr)
				}
				if e.Section != "s" || e.Key != "k" || e.Line != 3 {
					t.Errorf("error at %+v, want section s, key k, line 3", e)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func intIn(l Limits[int]) func(Section) (any, error) {
	return func(s Section) (any, error) {
		var n int
		err := s.Int("k", l, &n)
		return n, err
	}
}

func floatIn(l Limits[float64]) func(Section) (any, error) {
	return func(s Section) (any, error) {
		var n float64
		err := s.Float("k", l, &n)
		return n, err
	}
}

func secondsIn(l Limits[time.Duration]) func(Section) (any, error) {
	return func(s Section) (any, error) {
		var d time.Duration
		err := s.Seconds("k", l, &d)
		return d, err
	}
}

func durationIn(l Limits[time.Duration]) func(Section) (any, error) {
	return func(s Section) (any, error) {
		var d time.Duration
		err := s.Duration("k", l, &d)
		return d, err
	}
}

func boolean(s Section) (any, error) {
	var b bool
	err := s.Bool("k", &b)
	return b, err
}

// An absent key or section leaves the default alone.
func TestAbsentKeepsDefault(t *testing.T) {
	f := read(t, "[s]\nother = 1\n")
	for _, sec := range []Section{f.Section("s"), f.Section("missing")} {
		n, d, b := 7, 3*time.Second, true
		if err := sec.Int("k", Limits[int]{Min: 100}, &n); err != nil || n != 7 {
			t.Errorf("Int: %d, %v", n, err)
		}
		if err := sec.Duration("k", Limits[time.Duration]{Min: time.Hour}, &d); err != nil || d != 3*time.Second {
			t.Errorf("Duration: %v, %v", d, err)
		}
		if err := sec.Bool("k", &b); err != nil || !b {
			t.Errorf("Bool: %v, %v", b, err)
		}
		if v, ok := sec.String("k"); ok || v != "" {
			t.Errorf("String: %q, %v", v, ok)
		}
	}
}

func TestStringsListsPaths(t *testing.T) {
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	f := read(t, "[s]\ncmd = sinfo -h -o %N  # kept: no inline comments\nempty =\n"+
		"names = a, b,\n  c d\n  ,, e\nkeys = ~/.ssh/id, /abs/key,\n  rel/key\nhome = ~\nrel = out.csv\nabs = /srv/x\n")
	s := f.Section("s")
	str := func(key string) string { v, _ := s.String(key); return v }
	path := func(key string) string { v, _ := s.Path(key); return v }
	list, _ := s.List("names")
	paths, _ := s.Paths("keys")
	got := map[string]any{
		"cmd": str("cmd"), "empty": str("empty"), "empty path": path("empty"),
		"names": list, "keys": paths,
		"home": path("home"), "rel": path("rel"), "abs": path("abs"),
	}
	want := map[string]any{
		"cmd": "sinfo -h -o %N  # kept: no inline comments", "empty": "", "empty path": "",
		"names": []string{"a", "b", "c d", "e"},
		"keys":  []string{filepath.Join(home, ".ssh/id"), "/abs/key", "/etc/x/rel/key"},
		"home":  home, "rel": "/etc/x/out.csv", "abs": "/srv/x",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, ok := s.String("empty"); !ok {
		t.Error("an empty value reads as absent")
	}
}

func TestCheck(t *testing.T) {
	layout := Layout{
		Sections: []SectionRule{
			{Name: "common", Keys: []string{"user", "hosts"}},
			{Name: "gpu", Prefix: true, Shown: "[gpu-NAME]", Keys: []string{"gpus"}},
			{Name: "host_names", AnyKey: true},
		},
		Home: "common",
	}
	for _, tc := range []struct {
		name, src string
		want      *Error // nil: no error
	}{
		{"all known", "[common]\nUSER = a\n[gpu-a]\ngpus = 1\n[gpus]\ngpus = 2\n[host_names]\nanything = A\n", nil},
		{"empty file", "", nil},
		{"comments only", "# x\n; y\n", nil},
		{"stray key", "; top\nuser = a\n[common]\n", &Error{File: "f.ini", Line: 2, Key: "user",
			Msg: "a key before the first section", HintText: "put it under [common]"}},
		{"unknown section", "[common]\n[comon]\nuser = a\n", &Error{File: "f.ini", Line: 2, Section: "comon",
			Msg: "unknown section [comon]", HintText: "known sections: [common], [gpu-NAME], [host_names]"}},
		{"unknown key", "[common]\nuser = a\n\ntimout = 5\n", &Error{File: "f.ini", Line: 4, Section: "common", Key: "timout",
			Msg: "unknown key in [common]", HintText: "known keys: user, hosts"}},
		{"unknown key in a prefixed section", "[gpu-x]\ngpus = 0\nignore = a\n", &Error{File: "f.ini", Line: 3, Section: "gpu-x", Key: "ignore",
			Msg: "unknown key in [gpu-x]", HintText: "known keys: gpus"}},
		{"the first problem in the file's order", "[zzz]\n[common]\nbad = 1\n", &Error{File: "f.ini", Line: 1, Section: "zzz",
			Msg: "unknown section [zzz]", HintText: "known sections: [common], [gpu-NAME], [host_names]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Read(strings.NewReader(tc.src), "f.ini")
			if err != nil {
				t.Fatal(err)
			}
			err = f.Check(layout)
			if tc.want == nil {
				if err != nil {
					t.Errorf("got %v", err)
				}
				return
			}
			var got *Error
			if !errors.As(err, &got) {
				t.Fatalf("got %v (%T), want an *Error", err, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// ErrorAt, for problems found after reading, points at the key, else at
// its section's header, else at no line.
func TestErrorAt(t *testing.T) {
	f := read(t, "\n[defaults]\nuser = bob\n")
	for _, tc := range []struct{ section, key, want string }{
		{"defaults", "user", "/etc/x/f.ini:3: user: no such user"},
		{"defaults", "devices", "/etc/x/f.ini:2: devices: no such user"},
		{"tty", "enabled", "/etc/x/f.ini: enabled: no such user"},
	} {
		if got := f.ErrorAt(tc.section, tc.key, "no such user").Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// The error carries its hint for internal/cli, which prints it on a line
// of its own.
func TestErrorHint(t *testing.T) {
	var h interface{ Hint() string }
	err := error(&Error{File: "f.ini", Msg: "m", HintText: "do this"})
	if !errors.As(err, &h) || h.Hint() != "do this" {
		t.Errorf("hint not found through errors.As")
	}
	if got := err.Error(); got != "f.ini: m" {
		t.Errorf("got %q", got)
	}
}

// ini.v1's syntax errors get their line too.
func TestSyntaxError(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"[common\nuser = a\n", "f.ini:1: unclosed section: [common"},
		{"[common]\nuser = a\n\njust words\n", "f.ini:4: key-value delimiter not found: just words"},
		{"[common]\n= a\n", "f.ini:2: empty key name: = a"},
	} {
		_, err := Read(strings.NewReader(tc.src), "f.ini")
		var e *Error
		if !errors.As(err, &e) || err.Error() != tc.want {
			t.Errorf("%q: got %v, want %q", tc.src, err, tc.want)
		}
	}
}

// A value continued over more lines than ini.v1's 4 KiB read buffer holds
// (a long host list) stays one value.
func TestLongContinuedValue(t *testing.T) {
	var b strings.Builder
	b.WriteString("[common]\nhosts = gpu0000,\n")
	for range 1000 {
		b.WriteString("    gpu0001, gpu0002,\n")
	}
	b.WriteString("user = x\n")
	f := read(t, b.String())
	hosts, _ := f.Section("common").List("hosts")
	if len(hosts) != 2001 {
		t.Errorf("%d hosts", len(hosts))
	}
	if got := f.ErrorAt("common", "user", "m").Line; got != 1003 {
		t.Errorf("user at line %d, want 1003", got)
	}
}

// Whatever the file holds, reading and checking it returns a value or an
// *Error, and an error names a line that the file has.
func FuzzRead(f *testing.F) {
	for _, s := range []string{
		"[common]\nhosts = a,\n  b\n", "x = 1\n", "[a\n", "[s]\n\"k:1\" = v\r\n", "[s]\n`k=1` = v\n", "\n\t\n[ s ]\n k = v\n",
	} {
		f.Add(s)
	}
	layout := Layout{Sections: []SectionRule{{Name: "s", Keys: []string{"k"}}, {Name: "n", AnyKey: true}}, Home: "s"}
	f.Fuzz(func(t *testing.T, src string) {
		file, err := Read(strings.NewReader(src), "f.ini")
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%T: %v", err, err)
			}
			return
		}
		lines := strings.Count(src, "\n") + 1
		if err := file.Check(layout); err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Line <= 0 || e.Line > lines {
				t.Fatalf("%v (%T) in a file of %d lines", err, err, lines)
			}
		}
		// every section and key that ini.v1 found is at a line that
		// holds it
		rows := strings.Split(src, "\n")
		for _, sec := range file.ini.Sections() {
			name := sec.Name()
			if name != "DEFAULT" {
				if n := file.lines[name+"."]; n < 1 || !strings.Contains(rows[n-1], name) {
					t.Fatalf("[%s] at line %d", name, n)
				}
			}
			for _, k := range sec.KeyStrings() {
				n := file.lines[name+"."+k]
				if n < 1 {
					t.Fatalf("[%s] %s at no line", name, k)
				}
				row := strings.ToLower(rows[n-1])
				// ini.v1 numbers "-" keys #1, #2, ...
				if !strings.Contains(row, k) && !(strings.HasPrefix(k, "#") && strings.Contains(row, "-")) {
					t.Fatalf("[%s] %s at line %d", name, k, n)
				}
			}
		}
		for _, sec := range file.Sections() {
			for _, k := range sec.Keys() {
				var d time.Duration
				if err := sec.Duration(k, Limits[time.Duration]{}, &d); err != nil && err.(*Error).Line > lines {
					t.Fatalf("%v in a file of %d lines", err, lines)
				}
			}
		}
	})
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"7d", 7 * 24 * time.Hour, true},
		{"1d12h", 36 * time.Hour, true},
		{"90m", 90 * time.Minute, true},
		{"0d", 0, true},
		{"d", 0, false},
		{"-1d", 0, false},
		{"1.5d", 0, false},
		{"1d-2h", 0, false},
		{"999999d", 0, false},
		{"7 days", 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseDuration(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
