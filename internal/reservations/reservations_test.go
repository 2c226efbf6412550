package reservations

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/hosttext"
)

func at(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.ParseInLocation("2006-01-02 15:04", s, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []Reservation
	}{
		{"list form, whole host", `{"gpu01": [{"name": "alice", "date": "2026-12-01 18:00", "comment": "ICML"}]}`,
			[]Reservation{{Host: "gpu01", Name: "alice", Comment: "ICML", Until: at(t, "2026-12-01 18:00")}}},
		{"list form with gpus and gpu", `{"gpu01": [{"name": "a", "gpus": [0, "1"]}, {"name": "b", "gpu": 3}, {"name": "c", "gpus": "4,5"}]}`,
			[]Reservation{{Host: "gpu01", Name: "a", GPUs: []int{0, 1}}, {Host: "gpu01", Name: "b", GPUs: []int{3}},
				{Host: "gpu01", Name: "c", GPUs: []int{4, 5}}}},
		{"object form: one entry or a list", `{"gpu02": {"0": {"name": "bob", "date": "2026-12-01"}, "3": [{"user": "carol"}, {"name": "dan"}], "all": {"name": "eve"}}}`,
			[]Reservation{{Host: "gpu02", Name: "bob", GPUs: []int{0}, Until: at(t, "2026-12-02 00:00")},
				{Host: "gpu02", Name: "carol", GPUs: []int{3}}, {Host: "gpu02", Name: "dan", GPUs: []int{3}},
				{Host: "gpu02", Name: "eve"}}},
		{"empty list, empty object, null", `{"a": [], "b": {}, "c": null}`, nil},
		{"empty file", "  \n", nil},
		{"other date forms and extra keys", `{"h": [{"name": "x", "date": "2026-12-01T18:00:30", "slack": "#gpu"}, {"name": "y", "date": "2026-12-01T18:00:00+01:00"}]}`,
			[]Reservation{{Host: "h", Name: "x", Until: at(t, "2026-12-01 18:00").Add(30 * time.Second)},
				{Host: "h", Name: "y", Until: time.Date(2026, 12, 1, 18, 0, 0, 0, time.FixedZone("", 3600))}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, errs := parse([]byte(tt.src), time.UTC)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestActive(t *testing.T) {
	now := at(t, "2026-12-01 12:00")
	for _, tt := range []struct {
		r    Reservation
		want bool
	}{
		{Reservation{Until: at(t, "2026-12-01 12:01")}, true},
		{Reservation{Until: at(t, "2026-12-01 12:00")}, false},
		{Reservation{Until: at(t, "2026-11-30 09:00")}, false},
		{Reservation{}, true},
	} {
		if got := tt.r.Active(now); got != tt.want {
			t.Errorf("%v active at %v: %v", tt.r.Until, now, got)
		}
	}
}

// A malformed file names the line and column; a bad entry is left out and
// named, the others are kept.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name  string
		src   string
		want  []string
		kept  int
		whole bool
	}{
		{"missing comma", "{\n  \"gpu01\": [\n    {\"name\": \"a\"}\n    {\"name\": \"b\"}\n  ]\n}\n",
			[]string{"line 4, column 5: invalid character '{' after array element"}, 0, true},
		{"trailing comma", "{\"a\": [],\n}", []string{"line 2, column 1: invalid character '}' looking for beginning of object key string"}, 0, true},
		{"truncated", "{\"a\": [\n", []string{"line 2, column 1: unexpected end of file"}, 0, true},
		{"not an object", "[1, 2]", []string{"line 1, column 1: the file must be a JSON object of host names"}, 0, true},
		{"bad date", "{\"a\": [\n {\"name\": \"x\", \"date\": \"next week\"},\n {\"name\": \"y\"}]}",
			[]string{`line 2, column 2: a: date "next week" is not YYYY-MM-DD HH:MM`}, 1, false},
		{"bad gpu key and entry", "{\"a\": {\"gpu0\": {\"name\": \"x\"}, \"zero\": {}, \"1\": 5}}",
			[]string{`line 1, column 39: a: "zero" is not a GPU index`, `line 1, column 48: a: a reservation must be an object`}, 1, false},
		{"bad gpus", `{"a": [{"gpus": ["x"]}]}`, []string{`a: gpus: "x" is not a GPU index`}, 0, false},
		{"host value a string", `{"a": "alice"}`, []string{`line 1, column 7: a: want a list of reservations`}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, errs := parse([]byte(tt.src), time.UTC)
			if len(errs) != len(tt.want) {
				t.Fatalf("errors %v, want %d", errs, len(tt.want))
			}
			for i, e := range errs {
				if !strings.Contains(e.Error(), tt.want[i]) {
					t.Errorf("error %q\ndoes not contain %q", e, tt.want[i])
				}
				var pe *Error
				if !errors.As(e, &pe) || pe.Whole != tt.whole {
					t.Errorf("error %#v: want *Error with Whole %v", e, tt.whole)
				}
			}
			if len(got) != tt.kept {
				t.Errorf("kept %d reservations, want %d", len(got), tt.kept)
			}
		})
	}
}

func TestReadFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "reservations.json")
	os.WriteFile(p, []byte("{\n \"a\": [}\n"), 0o644)
	_, errs := ReadFile(p, time.UTC)
	if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), p+":2:8: invalid character '}'") {
		t.Errorf("got %v", errs)
	}
	_, errs = ReadFile(p+".missing", time.UTC)
	if len(errs) != 1 || !errors.Is(errs[0], os.ErrNotExist) {
		t.Errorf("missing file: %v", errs)
	}
}

// badDates is a file of n reservations, one a line, each with a date that
// does not parse.
func badDates(n int) []byte {
	var b strings.Builder
	b.WriteString("{\"gpu01\": [\n")
	for i := range n {
		if i > 0 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, "  {\"name\": \"user%d\", \"date\": \"someday %d\"}", i, i)
	}
	b.WriteString("\n]}\n")
	return []byte(b.String())
}

// Many problems: the first maxProblems, each at its own line, then one
// that counts the others.
func TestParseReportsAtMostSomeProblems(t *testing.T) {
	_, errs := parse(badDates(50), time.UTC)
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	var want []string
	for i := range maxProblems {
		want = append(want, fmt.Sprintf(`line %d, column 3: gpu01: date "someday %d" is not YYYY-MM-DD HH:MM`, i+2, i))
	}
	want = append(want, "and 30 more problems")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	_, errs = parse(badDates(maxProblems+1), time.UTC)
	if got := errs[len(errs)-1].Error(); got != "and 1 more problem" {
		t.Errorf("last error %q", got)
	}
	if _, errs = parse(badDates(maxProblems), time.UTC); len(errs) != maxProblems {
		t.Errorf("%d problems: %d errors, want each alone", maxProblems, len(errs))
	}
}

func TestReadFileNamesTheFileInTheCount(t *testing.T) {
	p := filepath.Join(t.TempDir(), "reservations.json")
	os.WriteFile(p, badDates(25), 0o644)
	_, errs := ReadFile(p, time.UTC)
	if len(errs) != maxProblems+1 || !strings.HasPrefix(errs[0].Error(), p+":2:3: gpu01: date") {
		t.Fatalf("got %d errors, the first %v", len(errs), errs[0])
	}
	if got, want := errs[maxProblems].Error(), "and 5 more problems in "+p; got != want {
		t.Errorf("last error %q, want %q", got, want)
	}
}

// A file over 16 MiB is refused as a whole, at the place it passes the
// limit, though it is valid JSON.
func TestReadFileBoundsTheSize(t *testing.T) {
	p := filepath.Join(t.TempDir(), "reservations.json")
	big := "{\"gpu01\": [{\"name\": \"alice\", \"comment\": \"" + strings.Repeat("x", maxFileBytes) + "\"}]}\n"
	os.WriteFile(p, []byte("\n"+big), 0o644)
	list, errs := ReadFile(p, time.UTC)
	if len(list) != 0 || len(errs) != 1 {
		t.Fatalf("%d reservations, errors %v", len(list), errs)
	}
	want := p + ":2:16777216: the file goes on past 16 MiB: no reservation was read from it"
	var pe *Error
	if errs[0].Error() != want || !errors.As(errs[0], &pe) || !pe.Whole {
		t.Errorf("error %#v\nwant %q, Whole", errs[0], want)
	}
}

// A fifo in the file's place is refused at once, not waited on.
func TestReadFileRefusesAFifo(t *testing.T) {
	p := filepath.Join(t.TempDir(), "reservations.json")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan []error)
	go func() {
		_, errs := ReadFile(p, time.UTC)
		done <- errs
	}()
	select {
	case errs := <-done:
		if len(errs) != 1 || errs[0].Error() != p+" is not a regular file" {
			t.Errorf("got %v", errs)
		}
	case <-time.After(time.Minute):
		t.Fatal("ReadFile waits on a fifo")
	}
}

// BenchmarkParseBadDates: 50,000 reservations whose dates do not parse.
func BenchmarkParseBadDates(b *testing.B) {
	data := badDates(50000)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, errs := parse(data, time.UTC); len(errs) != maxProblems+1 {
			b.Fatalf("%d errors", len(errs))
		}
	}
}

// Everything kept from the file, and every problem that quotes it, is
// printable and bounded: a name with a terminal escape cannot recolour
// render's error output or the -text table, and a 15 MiB key is not kept
// or printed whole.
func TestParseKeepsPrintableBoundedText(t *testing.T) {
	huge := strings.Repeat("h", 15<<20)
	tests := []struct {
		name string
		src  string
		want []Reservation
		errs []string
	}{
		{"escapes in host, name and comment",
			`{"gpu\u001b[2J01": [{"name": "al\u001b[31mice\u009b", "comment": "ICML\r\n\u0007deadline"}]}`,
			[]Reservation{{Host: "gpu?[2J01", Name: "al?[31mice?", Comment: "ICML???deadline"}}, nil},
		{"user read as name is cleaned too", `{"h": [{"user": "bob\u0000"}]}`,
			[]Reservation{{Host: "h", Name: "bob?"}}, nil},
		{"long name and comment are clipped",
			`{"h": [{"name": "` + strings.Repeat("n", 500) + `", "comment": "` + strings.Repeat("c", 5000) + `"}]}`,
			[]Reservation{{Host: "h", Name: strings.Repeat("n", 77) + "…", Comment: strings.Repeat("c", 253) + "…"}}, nil},
		{"huge host key", `{"` + huge + `": [{"name": "a"}]}`,
			[]Reservation{{Host: strings.Repeat("h", 77) + "…", Name: "a"}}, nil},
		{"bad date quotes clean text", `{"h\u001b]0;x\u0007": [{"date": "\u001b[2J` + strings.Repeat("9", 500) + `"}]}`, nil,
			[]string{`line 1, column 24: h?]0;x?: date "?[2J` + strings.Repeat("9", 73) + `…" is not YYYY-MM-DD HH:MM`}},
		{"bad GPU key quotes clean text", `{"h": {"\u009b31m` + strings.Repeat("k", 500) + `": {}}}`, nil,
			[]string{`line 1, column 521: h: "?31m` + strings.Repeat("k", 73) + `…" is not a GPU index`}},
		{"bad gpus quote clean text", `{"h": [{"gpus": "0,\u001b[1m"}]}`, nil,
			[]string{`line 1, column 8: h: gpus: "?[1m" is not a GPU index`}},
		{"bad entry names the clean host", `{"` + huge + `\u001b": 5}`, nil,
			[]string{`line 1, column 15728652: ` + strings.Repeat("h", 77) + `…: want a list of reservations or an object keyed by GPU index`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, errs := parse([]byte(tt.src), time.UTC)
			var msgs []string
			for _, e := range errs {
				msgs = append(msgs, e.Error())
			}
			if diff := cmp.Diff(tt.errs, msgs); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			for _, r := range got {
				for _, s := range []string{r.Host, r.Name, r.Comment} {
					if hosttext.Printable(s) != s || len(s) > maxComment {
						t.Errorf("kept %.100q: not printable or too long", s)
					}
				}
			}
		})
	}
}

// A file of many problems that each quote a long, hostile value: still the
// first maxProblems, each bounded, then the count.
func TestParseBoundsManyHostileProblems(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := range 30 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "\n\"h%d\\u001b[31m%s\": [{\"date\": \"\\u009b%s\"}]", i, strings.Repeat("x", 1000), strings.Repeat("y", 1000))
	}
	b.WriteString("}\n")
	_, errs := parse([]byte(b.String()), time.UTC)
	if len(errs) != maxProblems+1 || errs[maxProblems].Error() != "and 10 more problems" {
		t.Fatalf("%d errors, the last %v", len(errs), errs[len(errs)-1])
	}
	for _, e := range errs[:maxProblems] {
		if s := e.Error(); len(s) > 250 || hosttext.Printable(s) != s || strings.ContainsAny(s, "\x1b\u009b") {
			t.Errorf("problem %.120q... (%d bytes): not printable or too long", s, len(s))
		}
	}
}
