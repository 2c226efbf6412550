package loaddata

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/hoststatus"
)

func sampleRows() []Row {
	return []Row{
		{Timestamp: "2026-11-22T14:00:00Z", Host: "gpu01", HostStatus: hoststatus.OK,
			GPUIndex: IntOf(0), GPUUUID: "GPU-1", GPUName: "NVIDIA H100 80GB HBM3", GPUBusID: "00000000:09:00.0",
			GPUUtilPct: Number{}, MemUtilPct: Num(0), MemUsedMiB: Num(11052), MemTotalMiB: Num(81559),
			TempC: Num(35), PowerW: Num(71.15), PowerLimitW: Num(700), FanPct: Number{},
			PID: IntOf(21198), User: "alice", Command: `python train.py --name "a, b"`, ProcessMemMiB: Num(7484),
			SlurmJob: "1233_5", SlurmJobName: "train, \"big\"", SlurmPartition: "gpu", SlurmAccount: "vision-lab", Container: "0123456789ab", ContainerName: "trainer", Pod: "6f1d2c3b-aaaa-4bbb-8ccc-0123456789ab",
			ProcessElapsedS: IntOf(3600), CPUs: IntOf(64), Load1: Num(3.5), HostMemUsedMiB: Num(1000), HostMemTotalMiB: Num(2000)},
		{Timestamp: "2026-11-22T14:00:00Z", Host: "gpu02", HostStatus: hoststatus.Timeout, HostError: "no answer within 20s"},
	}
}

// columnNames lists the column names in file order.
func columnNames() []string {
	names := make([]string, len(columns))
	for i, c := range columns {
		names[i] = c.name
	}
	return names
}

// decode reads all rows of data as StreamFile would.
func decode(t testing.TB, data string) ([]Row, error) {
	t.Helper()
	var rows []Row
	_, err := stream(strings.NewReader(data), defaultLimits, func(r *Row) { rows = append(rows, *r) })
	return rows, err
}

func encode(t testing.TB, rows []Row) string {
	t.Helper()
	var buf bytes.Buffer
	if err := Encode(&buf, rows); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestRoundTripKeepsMissingApartFromZero(t *testing.T) {
	data := encode(t, sampleRows())
	lines := strings.Split(data, "\n")
	// gpu_util_pct is missing (empty), mem_util_pct is a real 0
	if !strings.Contains(lines[1], ",00000000:09:00.0,,,0,11052,81559,35,71.15,700,,,,,,,,,,,21198,") {
		t.Errorf("row 1 = %q", lines[1])
	}
	got, err := decode(t, data)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sampleRows(), got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestColumnsAreTheDocumentedOnes(t *testing.T) {
	want := "timestamp,host,host_status,host_error,gpu_index,gpu_uuid,gpu_name,gpu_vendor,gpu_bus_id,gpu_error," +
		"gpu_util_pct,mem_util_pct,mem_used_mib,mem_total_mib,temperature_c,power_w,power_limit_w,fan_pct," +
		"pstate,ecc_mode,ecc_uncorrected,retired_pages_pending,remapped_rows_pending,remapped_rows_failure,clock_events,xids,recovery_action," +
		"pid,user,command,process_mem_mib,process_elapsed_s,preemptible,process_sm_pct," +
		"slurm_job,slurm_job_name,slurm_partition,slurm_account,container,container_name,pod," +
		"cpus,load1,host_mem_used_mib,host_mem_total_mib,kernel_log"
	if got := strings.Join(columnNames(), ","); got != want {
		t.Errorf("columns changed; update the README too.\n got %s\nwant %s", got, want)
	}
	// what gocsv writes is what the reader's table says
	if header, _, _ := strings.Cut(encode(t, nil), "\n"); header != want {
		t.Errorf("gocsv writes the header\n%s\nwant\n%s", header, want)
	}
}

// distinctValue is a value for Row's field i that no other field has.
func distinctValue(t testing.TB, field reflect.Value, i int) {
	t.Helper()
	switch v := field.Addr().Interface().(type) {
	case *string:
		*v = fmt.Sprintf("text of field %d, \"quoted\"", i)
	case *hoststatus.Status:
		*v = hoststatus.All[i%len(hoststatus.All)]
	case *Number:
		*v = Num(float64(i) + 0.25)
	case *Int:
		*v = IntOf(int64(i) * 1000)
	case *Flag:
		*v = true
	case *Tri:
		*v = TriOf(i%2 == 0)
	default:
		t.Fatalf("Row field %d: a %T; give the test a value for it", i, v)
	}
}

// Every column round-trips through gocsv (writing) and stream (reading)
// into its own field: set alone, so that two columns swapped, or a column
// the reader drops, show; and all at once.
func TestEveryColumnRoundTrips(t *testing.T) {
	all := Row{HostStatus: hoststatus.OK} // a status is always needed
	for i, c := range columns {
		t.Run(c.name, func(t *testing.T) {
			want := Row{HostStatus: hoststatus.OK}
			distinctValue(t, reflect.ValueOf(&want).Elem().Field(c.field), i)
			distinctValue(t, reflect.ValueOf(&all).Elem().Field(c.field), i)
			got, err := decode(t, encode(t, []Row{want}))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]Row{want}, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	got, err := decode(t, encode(t, []Row{all}))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Row{all}, got); diff != "" {
		t.Errorf("all columns set (-want +got):\n%s", diff)
	}
}

// The table refuses what it could not read back.
func TestColumnsOfRefusesUnreadableFields(t *testing.T) {
	for name, typ := range map[string]reflect.Type{
		"untagged": reflect.TypeFor[struct{ A string }](),
		"twice": reflect.TypeFor[struct {
			A, B string `csv:"a"`
		}](),
		"unreadable": reflect.TypeFor[struct {
			A []byte `csv:"a"`
		}](),
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: columnsOf did not panic", name)
				}
			}()
			columnsOf(typ)
		}()
	}
}

func TestWriteFileIsAtomicAndReadable(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "load_data.csv")
	os.WriteFile(path, []byte("previous"), 0o644)
	if err := WriteFile(path, sampleRows()); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644 even under umask 077 (nginx must read it)", fi.Mode().Perm())
	}
	rows, err := ReadFile(path)
	if err != nil || len(rows) != 2 {
		t.Errorf("read back %d rows, %v", len(rows), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

// The temporary file is made beside the output even when $TMPDIR is on the
// same file system: a run killed mid-write must not leave it in $TMPDIR.
// A file made and removed in a folder changes the folder's mtime.
func TestWriteFileTempFileBesideTheOutput(t *testing.T) {
	tmp := t.TempDir() // the same file system as the output's folder
	t.Setenv("TMPDIR", tmp)
	long := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(tmp, long, long); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(filepath.Join(t.TempDir(), "load_data.csv"), sampleRows()); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.ModTime().Equal(long) {
		t.Errorf("$TMPDIR changed at %v: the temporary file was made there, not beside the output", fi.ModTime())
	}
}

// fetch never writes a file that render would refuse: a row longer than a
// record may be is an error naming the line, the file already there stays,
// and no temporary file is left.
func TestWriteFileRefusesWhatRenderRefuses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "load_data.csv")
	os.WriteFile(path, []byte("previous"), 0o644)
	rows := sampleRows()
	rows[1].Command = strings.Repeat("c", int(defaultLimits.record))
	err := WriteFile(path, rows)
	want := "line 3 would be more than 1 MiB, more than render reads; the previous file is kept"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	if b, _ := os.ReadFile(path); string(b) != "previous" {
		t.Errorf("the previous file was replaced by %d bytes", len(b))
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

func TestLimitedWriter(t *testing.T) {
	lim := limits{record: 600, file: 4000} // the header is some 400 bytes
	tests := []struct {
		name    string
		rows    int
		cell    int
		wantErr string
	}{
		{"fits", 5, 50, ""},
		{"a long line", 2, 700, "line 2 would be more than 600 bytes, more than render reads"},
		{"a big file", 80, 50, "would be more than 4000 bytes, more than render reads"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rows []Row
			for range tt.rows {
				rows = append(rows, Row{HostStatus: hoststatus.OK, Command: strings.Repeat("c", tt.cell)})
			}
			var b strings.Builder
			w := &limitedWriter{w: &b, lim: lim}
			err := Encode(w, rows)
			if got := fmt.Sprint(w.err); tt.wantErr == "" && (err != nil || w.err != nil) || tt.wantErr != "" && got != tt.wantErr {
				t.Fatalf("err %v, writer's %v; want %q", err, w.err, tt.wantErr)
			}
			if tt.wantErr == "" {
				if _, err := stream(strings.NewReader(b.String()), lim, func(*Row) {}); err != nil {
					t.Errorf("what was written does not read back under the same limits: %v", err)
				}
			}
		})
	}
}

// A run killed while writing leaves its temporary file beside the output;
// the next run removes it, and nothing else.
func TestRemoveLeftovers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "load_data.csv")
	for _, name := range []string{"load_data.csv", ".load_data.csv8674665223082153551", ".load_data.csv12", ".load_data.csv.0123456789abcdef.tmp", ".load_data.csv.0123.tmp",
		".load_data.csv.keep", "load_data.csv.lock", ".load_data.csvx1", "index.html"} {
		os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644)
	}
	os.Mkdir(filepath.Join(dir, ".load_data.csv77"), 0o755)
	if err := RemoveLeftovers(path); err != nil {
		t.Fatal(err)
	}
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{".load_data.csv.0123.tmp", ".load_data.csv.keep", ".load_data.csv77", ".load_data.csvx1", "index.html", "load_data.csv", "load_data.csv.lock"}
	if diff := cmp.Diff(want, left); diff != "" {
		t.Errorf("files left (-want +got):\n%s", diff)
	}
}

// host_status takes only the words fetch writes: a forged or mistyped one
// is an error at its line and column, not a host failed for no reason.
func TestHostStatusWords(t *testing.T) {
	csv := encode(t, []Row{{Host: "gpu01", HostStatus: hoststatus.OK}, {Host: "gpu02", HostStatus: "bogus"}})
	_, err := stream(strings.NewReader(csv), defaultLimits, func(*Row) {})
	if err == nil || !strings.Contains(err.Error(), `line 3 (column host_status): "bogus" is not a host status`) {
		t.Errorf("got %v", err)
	}
}

// A file written part by part (fetch's hosts as they answer) is byte for
// byte the file written from all the rows at once: values that need
// quoting, empty parts and no parts at all included.
func TestWriteFileRecordsIsWriteFile(t *testing.T) {
	row := func(host, cmd string) Row {
		return Row{Timestamp: "2026-11-25T06:00:00Z", Host: host, HostStatus: hoststatus.OK, GPUIndex: IntOf(0),
			GPUName: "NVIDIA H100 80GB HBM3", MemUsedMiB: Num(1.5), User: "alice", Command: cmd}
	}
	for _, tt := range []struct {
		name  string
		parts [][]Row
	}{
		{"none", nil},
		{"empty parts", [][]Row{{}, nil}},
		{"hosts", [][]Row{
			{row("gpu01", "python train.py"), row("gpu01", `a "quoted", comma`)},
			{},
			{row("gpu02", "line\nbreak"), row("gpu02", " lead space"), row("gpu02", "")},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			var all []Row
			var records [][]byte
			for _, p := range tt.parts {
				all = append(all, p...)
				r, err := Records(p)
				if err != nil {
					t.Fatal(err)
				}
				records = append(records, r)
			}
			if err := WriteFile(dir+"/whole.csv", all); err != nil {
				t.Fatal(err)
			}
			if err := WriteFileRecords(dir+"/parts.csv", records); err != nil {
				t.Fatal(err)
			}
			whole, err := os.ReadFile(dir + "/whole.csv")
			if err != nil {
				t.Fatal(err)
			}
			parts, err := os.ReadFile(dir + "/parts.csv")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(whole), string(parts)); diff != "" {
				t.Errorf("(-WriteFile +WriteFileRecords):\n%s", diff)
			}
			if st, err := os.Stat(dir + "/parts.csv"); err != nil || st.Mode().Perm() != 0o644 {
				t.Errorf("mode: %v %v, want 0644", st.Mode(), err)
			}
		})
	}
}
