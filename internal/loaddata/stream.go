package loaddata

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"io"
	"os"
	"slices"
	"strings"
)

// StreamFile reads path one row at a time and hands each row to add, so
// that the rows are never all in memory (render keeps only what it builds
// from them). Columns are found by header name: every one of Columns() is
// required, none may appear twice, other columns are ignored. The row
// passed to add is reused; its strings are interned (a host's name, a model,
// a user or a command is one string however many rows repeat it) and never
// share memory with the file's lines. It returns the number of rows; errors
// start with the path and name the line and column.
func StreamFile(path string, add func(*Row)) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := Stream(bufio.NewReaderSize(f, 64<<10), add)
	if err != nil {
		return n, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

// A column's setter parses one cell into the row.
type setter func(r *Row, s string, in *interner) error

func str(field func(*Row) *string) setter {
	return func(r *Row, s string, in *interner) error {
		*field(r) = in.get(s)
		return nil
	}
}

func number(field func(*Row) *Number) setter {
	return func(r *Row, s string, _ *interner) error {
		if s == "" {
			*field(r) = Number{}
			return nil
		}
		return field(r).UnmarshalCSV(s)
	}
}

func integer(field func(*Row) *Int) setter {
	return func(r *Row, s string, _ *interner) error {
		if s == "" {
			*field(r) = Int{}
			return nil
		}
		return field(r).UnmarshalCSV(s)
	}
}

// columns are load_data.csv's columns and how each is read; a test checks
// that they are Columns().
var columns = []struct {
	name string
	set  setter
}{
	{"timestamp", str(func(r *Row) *string { return &r.Timestamp })},
	{"host", str(func(r *Row) *string { return &r.Host })},
	{"host_status", func(r *Row, s string, in *interner) error { r.HostStatus = hoststatus.Status(in.get(s)); return nil }},
	{"host_error", str(func(r *Row) *string { return &r.HostError })},
	{"gpu_index", integer(func(r *Row) *Int { return &r.GPUIndex })},
	{"gpu_uuid", str(func(r *Row) *string { return &r.GPUUUID })},
	{"gpu_name", str(func(r *Row) *string { return &r.GPUName })},
	{"gpu_bus_id", str(func(r *Row) *string { return &r.GPUBusID })},
	{"gpu_error", str(func(r *Row) *string { return &r.GPUError })},
	{"gpu_util_pct", number(func(r *Row) *Number { return &r.GPUUtilPct })},
	{"mem_util_pct", number(func(r *Row) *Number { return &r.MemUtilPct })},
	{"mem_used_mib", number(func(r *Row) *Number { return &r.MemUsedMiB })},
	{"mem_total_mib", number(func(r *Row) *Number { return &r.MemTotalMiB })},
	{"temperature_c", number(func(r *Row) *Number { return &r.TempC })},
	{"power_w", number(func(r *Row) *Number { return &r.PowerW })},
	{"power_limit_w", number(func(r *Row) *Number { return &r.PowerLimitW })},
	{"fan_pct", number(func(r *Row) *Number { return &r.FanPct })},
	{"pid", integer(func(r *Row) *Int { return &r.PID })},
	{"user", str(func(r *Row) *string { return &r.User })},
	{"command", str(func(r *Row) *string { return &r.Command })},
	{"process_mem_mib", number(func(r *Row) *Number { return &r.ProcessMemMiB })},
	{"process_elapsed_s", integer(func(r *Row) *Int { return &r.ProcessElapsedS })},
	{"preemptible", func(r *Row, s string, _ *interner) error {
		if s == "" {
			r.Preemptible = false
			return nil
		}
		return r.Preemptible.UnmarshalCSV(s)
	}},
	{"cpus", integer(func(r *Row) *Int { return &r.CPUs })},
	{"load1", number(func(r *Row) *Number { return &r.Load1 })},
	{"host_mem_used_mib", number(func(r *Row) *Number { return &r.HostMemUsedMiB })},
	{"host_mem_total_mib", number(func(r *Row) *Number { return &r.HostMemTotalMiB })},
}

// Stream is StreamFile for a reader; errors name the line and column.
func Stream(r io.Reader, add func(*Row)) (int, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return 0, errors.New("the file is empty")
	}
	if err != nil {
		return 0, csvError(err)
	}
	header = slices.Clone(header) // the reader reuses its record
	// how each of the file's columns is read; nil: not one of ours
	setters := make([]setter, len(header))
	found := map[string]bool{}
	for i, h := range header {
		if i == 0 {
			h = strings.TrimPrefix(h, "\uFEFF") // a byte order mark
		}
		if found[h] {
			return 0, fmt.Errorf("line 1: column %s appears twice", h)
		}
		found[h] = true
		for _, c := range columns {
			if c.name == h {
				setters[i] = c.set
			}
		}
	}
	var missing []string
	for _, c := range columns {
		if !found[c.name] {
			missing = append(missing, c.name)
		}
	}
	if len(missing) > 0 {
		return 0, fmt.Errorf("line 1: not a load_data.csv header: no column %s", strings.Join(missing, ", "))
	}
	in := &interner{m: map[string]string{}}
	var row Row
	n := 0
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, csvError(err)
		}
		row = Row{}
		for i, s := range rec {
			if setters[i] == nil {
				continue
			}
			if err := setters[i](&row, s, in); err != nil {
				line, _ := cr.FieldPos(i)
				return n, fmt.Errorf("line %d (column %s): %w", line, header[i], err)
			}
		}
		n++
		add(&row)
	}
}

// csvError names the line (and column) of a syntax error.
func csvError(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		col := ""
		if cols := Columns(); pe.Column > 0 && pe.Column <= len(cols) {
			col = fmt.Sprintf(" (column %s)", cols[pe.Column-1])
		}
		return fmt.Errorf("line %d%s: %v", pe.Line, col, pe.Err)
	}
	return err
}

// interner keeps one copy of each string: the CSV repeats host names,
// models, users and commands on many rows, and a cell read by encoding/csv
// shares memory with its whole line.
type interner struct {
	m map[string]string
}

func (in *interner) get(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := in.m[s]; ok {
		return v
	}
	v := strings.Clone(s)
	in.m[v] = v
	return v
}
