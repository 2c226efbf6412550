package loaddata

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/bytesize"
)

// Stream reads what Encode (gocsv) writes, whatever the quoting and line
// endings.
func TestStream(t *testing.T) {
	good := encode(t, sampleRows())
	header := strings.Join(columnNames(), ",") + "\n"
	line := strings.SplitAfter(good, "\n")[1] // alice's process
	quoted := strings.Replace(line, "NVIDIA H100 80GB HBM3", `"NVIDIA ""H100"", 80GB"`, 1)
	tests := []struct {
		name string
		data string
		want []Row
	}{
		{"as written", good, sampleRows()},
		{"crlf", strings.ReplaceAll(good, "\n", "\r\n"), sampleRows()},
		{"quoted", header + quoted, []Row{func() Row { r := sampleRows()[0]; r.GPUName = `NVIDIA "H100", 80GB`; return r }()}},
		{"bom", "\uFEFF" + good, sampleRows()},
		{"extra column", strings.TrimSuffix(header, "\n") + ",extra\n" + strings.TrimSuffix(line, "\n") + ",x\n", sampleRows()[:1]},
		{"only header", header, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decode(t, tt.data)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// What is not load_data.csv is refused with the line, and the column when
// a cell is at fault. A syntax error gives the byte in the line:
// encoding/csv does not say which field it was in.
func TestStreamErrors(t *testing.T) {
	good := encode(t, sampleRows())
	header := strings.Join(columnNames(), ",") + "\n"
	line := strings.SplitAfter(good, "\n")[1]
	tests := []struct{ name, data, want string }{
		{"empty", "", "the file is empty"},
		{"not ours", "a,b\n1,2\n", "line 1: not a load_data.csv header: no column timestamp, host,"},
		{"bad number", header + strings.Replace(line, ",11052,", ",lots,", 1), `line 2 (column mem_used_mib): "lots" is not a number`},
		{"bad pid", header + strings.Replace(line, ",21198,", ",21x,", 1), `line 2 (column pid): "21x" is not a whole number`},
		{"bad flag", header + strings.Replace(line, ",3600,,", ",3600,maybe,", 1), `line 2 (column preemptible): "maybe" is not yes or empty`},
		{"short row", header + line + "x,y\n", "line 3: 2 fields, the header has 46"},
		{"twice", strings.TrimSuffix(header, "\n") + ",host\n", "line 1: column host appears twice"},
		{"bare quote in the third cell", header + `a,b,c"d` + "\n", `line 2, byte 6: bare " in non-quoted-field`},
		{"unclosed quote", header + "x,\"y\nz\n", `line 3, byte 3 (in the record from line 2): extraneous or missing " in quoted-field`},
		{"header over the limit", strings.Repeat("h", 2<<20) + "\n", "line 1: a record longer than 1 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decode(t, tt.data)
			if err == nil || err.Error() != tt.want && !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("error %v\nwant it to start %q", err, tt.want)
			}
		})
	}
}

// Strings are interned: a host's name is one string on all its rows, so
// render's memory does not grow with repeated cells.
func TestStreamInterns(t *testing.T) {
	rows := sampleRows()
	rows[1].Host = rows[0].Host
	var hosts []string
	_, err := stream(strings.NewReader(encode(t, rows)), defaultLimits, func(r *Row) { hosts = append(hosts, r.Host) })
	if err != nil || len(hosts) != 2 {
		t.Fatalf("%d rows, %v", len(hosts), err)
	}
	if unsafe.StringData(hosts[0]) != unsafe.StringData(hosts[1]) {
		t.Errorf("the host name is not interned")
	}
}

// generated is a file made as it is read: head, then unit repeated to size
// bytes in all. It fails the test if read past maxRead, the most a bounded
// reader may ask for.
type generated struct {
	t             testing.TB
	head, unit    string
	size, maxRead int64
	off           int64
}

func (g *generated) Read(p []byte) (int, error) {
	if g.off >= g.size {
		return 0, io.EOF
	}
	if g.off >= g.maxRead {
		g.t.Errorf("read past %d bytes: the reader does not stop at the limit", g.maxRead)
		return 0, errors.New("read too far")
	}
	p = p[:min(int64(len(p)), g.size-g.off, g.maxRead-g.off)]
	for i := range p {
		at := g.off + int64(i)
		if at < int64(len(g.head)) {
			p[i] = g.head[at]
		} else {
			p[i] = g.unit[(at-int64(len(g.head)))%int64(len(g.unit))]
		}
	}
	g.off += int64(len(p))
	return len(p), nil
}

// allocated is how many bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A 64 MiB cell, on one line or spread over many in a quoted cell, is
// refused at the record limit: the reader reads little past it and holds
// little, and the rows before it were read.
func TestStreamBoundsARecord(t *testing.T) {
	header := strings.Join(columnNames(), ",") + "\n"
	row := strings.SplitAfter(encode(t, sampleRows()), "\n")[1]
	lim := defaultLimits
	tests := []struct {
		name, head, unit string
		want             string
	}{
		{"one line", header + row, "x", "line 3: a record longer than 1 MiB"},
		{"quoted over many lines", header + row + `"`, "x\n", "line 3: a record longer than 1 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := &generated{t: t, head: tt.head, unit: tt.unit, size: 64 << 20,
				maxRead: int64(len(tt.head)) + lim.record + 3*readAhead}
			var n int
			var err error
			alloc := allocated(func() { n, err = stream(in, lim, func(*Row) {}) })
			if err == nil || err.Error() != tt.want {
				t.Errorf("error %v, want %q", err, tt.want)
			}
			if n != 1 {
				t.Errorf("%d rows read before the long one, want 1", n)
			}
			// encoding/csv's buffers grow by doubling to about the limit
			if max := uint64(12 * lim.record); alloc > max {
				t.Errorf("allocated %d bytes, want at most %d", alloc, max)
			}
		})
	}
}

// A file over its size limit is refused; one at the limit is read.
func TestStreamBoundsTheFile(t *testing.T) {
	data := encode(t, sampleRows())
	lim := limits{record: 1 << 20, file: int64(len(data))}
	if _, err := stream(strings.NewReader(data), lim, func(*Row) {}); err != nil {
		t.Errorf("a file of exactly the limit: %v", err)
	}
	_, err := stream(strings.NewReader(data+data[len(data)-10:]), lim, func(*Row) {})
	if want := "line 4: the file goes on past " + bytesize.Exact(lim.file); err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

// StreamFile's errors start with the path.
func TestStreamFileNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "load_data.csv")
	header := strings.Join(columnNames(), ",") + "\n"
	os.WriteFile(path, []byte(header+strings.Repeat("x", 3<<20)+"\n"), 0o644)
	_, err := StreamFile(path, func(*Row) {})
	if want := path + ": line 2: a record longer than 1 MiB"; err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

// BenchmarkStreamBigCell: a load_data.csv whose second line is one 1 GiB
// cell, refused after its first MiB.
func BenchmarkStreamBigCell(b *testing.B) {
	header := strings.Join(columnNames(), ",") + "\n"
	var alloc uint64
	for b.Loop() {
		in := &generated{t: b, head: header, unit: "x", size: 1 << 30, maxRead: 1 << 30}
		alloc += allocated(func() {
			if _, err := stream(in, defaultLimits, func(*Row) {}); err == nil {
				b.Fatal("no error")
			}
		})
	}
	b.ReportMetric(float64(alloc)/float64(b.N)/(1<<20), "alloc-MiB/op")
}

// BenchmarkStream: 10,000 rows like a fleet's, a few processes each.
func BenchmarkStream(b *testing.B) {
	var rows []Row
	for i := range 10000 {
		r := sampleRows()[i%2]
		r.Host = fmt.Sprintf("gpu%04d", i/16)
		rows = append(rows, r)
	}
	data := encode(b, rows)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if n, err := stream(strings.NewReader(data), defaultLimits, func(*Row) {}); err != nil || n != len(rows) {
			b.Fatal(n, err)
		}
	}
}

// A line of exactly the record limit is read; one byte more is refused at
// its line, whether the reader gets the file in one piece or byte by byte.
func TestStreamRecordLimitIsExact(t *testing.T) {
	rows := sampleRows()
	rows[0].Command = strings.Repeat("c", 1000)
	data := encode(t, rows)
	longest := len(strings.Split(data, "\n")[1])
	for _, tt := range []struct {
		name   string
		record int
		want   string
	}{
		{"at the limit", longest, ""},
		{"one byte over", longest - 1, "line 2: a record longer than " + bytesize.Exact(int64(longest-1))},
	} {
		for _, pieces := range []struct {
			name string
			r    func(io.Reader) io.Reader
		}{{"whole", func(r io.Reader) io.Reader { return r }}, {"byte by byte", iotest.OneByteReader}} {
			t.Run(tt.name+", "+pieces.name, func(t *testing.T) {
				lim := limits{record: int64(tt.record), file: 1 << 20}
				_, err := stream(pieces.r(strings.NewReader(data)), lim, func(*Row) {})
				if got := fmt.Sprint(err); tt.want == "" && err != nil || tt.want != "" && got != tt.want {
					t.Errorf("error %v, want %q", err, tt.want)
				}
			})
		}
	}
}

// A file written before the attribution columns existed (an older fetch,
// or an old file given to render -import) reads, with them empty.
func TestStreamOlderFile(t *testing.T) {
	rows := sampleRows()
	var old strings.Builder
	r := csv.NewReader(strings.NewReader(encode(t, rows)))
	w := csv.NewWriter(&old)
	var keep []int
	for i := 0; ; i++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			for j, name := range rec {
				if !optional[name] {
					keep = append(keep, j)
				}
			}
			if len(keep) != len(rec)-19 {
				t.Fatalf("header %v: want 19 optional columns", rec)
			}
		}
		var out []string
		for _, j := range keep {
			out = append(out, rec[j])
		}
		if err := w.Write(out); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	got, err := decode(t, old.String())
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		rows[i].SlurmJob, rows[i].SlurmJobName, rows[i].SlurmPartition, rows[i].SlurmAccount = "", "", "", ""
		rows[i].Container, rows[i].ContainerName, rows[i].Pod = "", "", ""
	}
	if diff := cmp.Diff(rows, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
