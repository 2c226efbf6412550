package loaddata

import (
	"bytes"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
)

func TestStreamColumnsAreTheStructTags(t *testing.T) {
	var names []string
	for _, c := range columns {
		names = append(names, c.name)
	}
	if diff := cmp.Diff(Columns(), names); diff != "" {
		t.Errorf("columns (-struct tags +stream):\n%s", diff)
	}
}

// Stream reads what Encode (gocsv) writes, whatever the quoting and line
// endings, and refuses what is not load_data.csv with the line and column.
func TestStream(t *testing.T) {
	var buf bytes.Buffer
	if err := Encode(&buf, sampleRows()); err != nil {
		t.Fatal(err)
	}
	good := buf.String()
	header := strings.Join(Columns(), ",") + "\n"
	line := strings.SplitAfter(good, "\n")[1] // alice's process
	quoted := strings.Replace(line, "NVIDIA H100 80GB HBM3", `"NVIDIA ""H100"", 80GB"`, 1)
	for name, tt := range map[string]struct {
		data string
		want []Row
	}{
		"as written": {good, sampleRows()},
		"crlf":       {strings.ReplaceAll(good, "\n", "\r\n"), sampleRows()},
		"quoted":     {header + quoted, []Row{func() Row { r := sampleRows()[0]; r.GPUName = `NVIDIA "H100", 80GB`; return r }()}},
		"bom":        {"\uFEFF" + good, sampleRows()},
		"extra column": {strings.TrimSuffix(header, "\n") + ",extra\n" + strings.TrimSuffix(line, "\n") + ",x\n",
			sampleRows()[:1]},
		"only header": {header, nil},
	} {
		got, err := Decode(strings.NewReader(tt.data))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	for name, tt := range map[string]struct{ data, want string }{
		"empty":      {"", "the file is empty"},
		"not ours":   {"a,b\n1,2\n", "line 1: not a load_data.csv header: no column timestamp, host,"},
		"bad number": {header + strings.Replace(line, ",11052,", ",lots,", 1), `line 2 (column mem_used_mib): "lots" is not a number`},
		"bad pid":    {header + strings.Replace(line, ",21198,", ",21x,", 1), `line 2 (column pid): "21x" is not a whole number`},
		"short row":  {header + line + "x,y\n", "line 3 (column timestamp): wrong number of fields"},
		"twice":      {strings.TrimSuffix(header, "\n") + ",host\n", "line 1: column host appears twice"},
		"bad quote":  {header + `x,"y` + "\n", "line 2"},
		"bad flag":   {header + strings.Replace(line, ",3600,,", ",3600,maybe,", 1), `line 2 (column preemptible): "maybe" is not yes or empty`},
	} {
		_, err := Decode(strings.NewReader(tt.data))
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want it to start %q", name, err, tt.want)
		}
	}
}

// Strings are interned: a host's name is one string on all its rows, so
// render's memory does not grow with repeated cells.
func TestStreamInterns(t *testing.T) {
	var buf bytes.Buffer
	rows := sampleRows()
	rows[1].Host = rows[0].Host
	Encode(&buf, rows)
	var hosts []string
	if _, err := Stream(&buf, func(r *Row) { hosts = append(hosts, r.Host) }); err != nil || len(hosts) != 2 {
		t.Fatalf("%d rows, %v", len(hosts), err)
	}
	if unsafe.StringData(hosts[0]) != unsafe.StringData(hosts[1]) {
		t.Errorf("the host name is not interned")
	}
}
