package loaddata

import (
	"encoding/csv"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Text a host chose comes back from the file exactly, while the file holds
// no text cell a spreadsheet would run as a formula; numbers, negative
// ones too, are written as they are.
func TestTextCellsAreNeverFormulas(t *testing.T) {
	tests := []struct {
		name, cell, written string
	}{
		{"command", "=cmd|' /C calc'!A0", "'=cmd|' /C calc'!A0"},
		{"plus", "+1+1", "'+1+1"},
		{"minus", "-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0"},
		{"at", "@SUM(1+1)", "'@SUM(1+1)"},
		{"tab", "\t=1", "'\t=1"},
		{"carriage return", "\r=1", "'\r=1"},
		{"a quote", "'=1", "''=1"},
		{"two quotes", "''", "'''"},
		{"quote alone", "'", "''"},
		{"plain", "python train.py", "python train.py"},
		{"formula later on", "a=1", "a=1"},
		{"empty", "", ""},
		{"space first", " =1", " =1"}, // spreadsheets take it as text
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows := sampleRows()[:1]
			rows[0].Command, rows[0].User, rows[0].SlurmJobName = tt.cell, tt.cell, tt.cell
			rows[0].MemUtilPct = Num(-3)
			path := filepath.Join(t.TempDir(), "load_data.csv")
			if err := WriteFile(path, rows); err != nil {
				t.Fatal(err)
			}
			got, err := ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(rows, got); diff != "" {
				t.Errorf("read back (-written +read):\n%s", diff)
			}
			recs, err := csv.NewReader(strings.NewReader(encode(t, rows))).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			cell := map[string]string{}
			for i, name := range recs[0] {
				cell[name] = recs[1][i]
			}
			for _, col := range []string{"command", "user", "slurm_job_name"} {
				if cell[col] != tt.written {
					t.Errorf("%s written as %q, want %q", col, cell[col], tt.written)
				}
			}
			if cell["mem_util_pct"] != "-3" {
				t.Errorf("a negative number written as %q", cell["mem_util_pct"])
			}
		})
	}
}

// Whatever text a cell holds, the file says it back, and no text cell of
// the file starts like a formula.
func FuzzTextCellRoundTrip(f *testing.F) {
	for _, s := range []string{"=cmd|' /C calc'!A0", "'", "''=x", "-1", "\t", "\r\n=1", "a\"b,c\nd", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rows := sampleRows()[:1]
		rows[0].Command, rows[0].Host = s, "h"+s
		data := encode(t, rows)
		got, err := decode(t, data)
		if err != nil {
			if strings.Contains(err.Error(), "longer than") {
				return
			}
			t.Fatalf("%q: %v", s, err)
		}
		want := strings.ReplaceAll(s, "\r\n", "\n") // encoding/csv reads a quoted line end so
		if len(got) != 1 || got[0].Command != want || got[0].Host != "h"+want {
			t.Fatalf("%q read back as %+v", s, got)
		}
		recs, err := csv.NewReader(strings.NewReader(data)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range columns {
			if cell := recs[1][i]; c.text && cell != "" && strings.ContainsRune("=+-@\t\r", rune(cell[0])) {
				t.Errorf("column %s written as %q", c.name, cell)
			}
		}
	})
}
