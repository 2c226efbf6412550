package render

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/loaddata"
)

func TestCSVColumnsAreLoaddatas(t *testing.T) {
	var names []string
	for _, c := range columns {
		names = append(names, c.name)
	}
	if diff := cmp.Diff(loaddata.Columns(), names); diff != "" {
		t.Errorf("columns (-loaddata +render):\n%s", diff)
	}
}

func decodeAll(data []byte) ([]loaddata.Row, error) {
	var rows []loaddata.Row
	_, err := decodeCSV(bytes.NewReader(data), func(r *loaddata.Row) { rows = append(rows, *r) })
	return rows, err
}

// render's streaming reader reads what loaddata.Decode reads.
func TestCSVReadsWhatLoaddataReads(t *testing.T) {
	fixture, err := os.ReadFile("testdata/load_data.csv")
	if err != nil {
		t.Fatal(err)
	}
	var fleet bytes.Buffer
	if err := loaddata.Encode(&fleet, fleetRows(20, 8)); err != nil {
		t.Fatal(err)
	}
	header := strings.Join(loaddata.Columns(), ",") + "\n"
	line := strings.Split(string(fixture), "\n")[2] + "\n" // alice's process
	for name, data := range map[string]string{
		"fixture": string(fixture), "fleet": fleet.String(),
		"quoted": header + strings.Replace(line, "NVIDIA H100 80GB HBM3", `"NVIDIA ""H100"", 80GB"`, 1),
		"crlf":   strings.ReplaceAll(string(fixture), "\n", "\r\n"),
	} {
		want, werr := loaddata.Decode(strings.NewReader(data))
		got, gerr := decodeAll([]byte(data))
		if werr != nil || gerr != nil {
			t.Fatalf("%s: loaddata %v, render %v", name, werr, gerr)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-loaddata +render):\n%s", name, diff)
		}
	}
	for name, tt := range map[string]struct{ data, want string }{
		"empty":        {"", "the file is empty"},
		"not ours":     {"a,b\n1,2\n", "line 1: not a load_data.csv header"},
		"bad number":   {header + strings.Replace(line, ",61000,", ",lots,", 1), `line 2 (column mem_used_mib): "lots" is not a number`},
		"bad pid":      {header + strings.Replace(line, ",4101,", ",41x,", 1), `line 2 (column pid): "41x" is not a whole number`},
		"short row":    {header + line + "x,y\n", "line 3 (column timestamp): wrong number of fields"},
		"twice":        {strings.TrimSuffix(header, "\n") + ",host\n", "line 1: column host appears twice"},
		"bad quote":    {header + `x,"y` + "\n", `line 2`},
		"bad flag":     {header + strings.Replace(line, ",93784,,", ",93784,maybe,", 1), `line 2 (column preemptible): "maybe" is not yes or empty`},
		"only header":  {header, ""},
		"extra column": {strings.TrimSuffix(header, "\n") + ",extra\n" + strings.TrimSuffix(line, "\n") + ",x\n", ""},
	} {
		_, err := decodeAll([]byte(tt.data))
		_, lerr := loaddata.Decode(strings.NewReader(tt.data))
		if tt.want == "" {
			if err != nil || lerr != nil {
				t.Errorf("%s: render %v, loaddata %v", name, err, lerr)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", name, err, tt.want)
		}
		if lerr == nil {
			t.Errorf("%s: loaddata reads it", name)
		}
	}
}

// Strings are interned: a host's name is one string on all its rows.
func TestCSVInterns(t *testing.T) {
	var fleet bytes.Buffer
	loaddata.Encode(&fleet, fleetRows(2, 8))
	var hosts []string
	decodeCSV(&fleet, func(r *loaddata.Row) { hosts = append(hosts, r.Host) })
	if len(hosts) < 2 || strings.Clone(hosts[0]) != hosts[1] {
		t.Fatal("rows")
	}
	if p0, p1 := unsafeData(hosts[0]), unsafeData(hosts[1]); p0 != p1 {
		t.Errorf("the host name is not interned")
	}
}

func unsafeData(s string) *byte { return unsafe.StringData(s) }
