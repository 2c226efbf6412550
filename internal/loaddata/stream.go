package loaddata

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"unsafe"

	"github.com/gpumon/gpumon/internal/hoststatus"
)

// StreamFile reads path one row at a time and hands each row to add, so
// that the rows are never all in memory (render keeps only what it builds
// from them). Columns are found by header name: every column of Row is
// required (but those in optional), none may appear twice, other columns are ignored. The row
// passed to add is reused; its strings are interned (a host's name, a model,
// a user or a command is one string however many rows repeat it) and never
// share memory with the file's lines. A record (a row, or the header) over
// 1 MiB or a file over 512 MiB is an error: reading stops there, so memory
// and time stay bounded whatever the file holds. It returns the number of
// rows; errors start with the path and name the line and column.
func StreamFile(path string, add func(*Row)) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var size int64
	if st, err := f.Stat(); err == nil {
		size = st.Size()
	}
	n, err := streamSized(f, defaultLimits, size, add)
	if err != nil {
		return n, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

// column is one of Row's fields as the file knows it: its csv tag, and how a
// cell is read into it.
type column struct {
	name  string
	field int  // Row's field index
	text  bool // a string, written quoted (quoteText)
	// read sets the column's field of row from cell: a closure made once
	// per field, so that a row costs no reflection.
	read func(row *Row, cell string, in *interner) error
}

// columns are Row's csv tags in order: the one list of load_data.csv's
// columns, which gocsv writes and stream reads.
var columns = columnsOf(reflect.TypeFor[Row]())

// cellUnmarshaler is what gocsv calls to read a cell (Number, Int, Flag).
type cellUnmarshaler interface {
	UnmarshalCSV(string) error
}

// columnsOf makes the reading table from t's csv tags. A field it could not
// read (or gocsv would write under another name) is a programming error,
// found when the package loads.
func columnsOf(t reflect.Type) []column {
	var cols []column
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("csv"), ",")
		if name == "" || name == "-" || f.Anonymous {
			panic(fmt.Sprintf("loaddata: Row.%s has no csv column name", f.Name))
		}
		if slices.ContainsFunc(cols, func(c column) bool { return c.name == name }) {
			panic(fmt.Sprintf("loaddata: column %s is on two fields of Row", name))
		}
		cols = append(cols, column{name: name, field: i, text: isText(f.Type), read: fieldReader(f)})
	}
	return cols
}

// isText is whether a field of type t is text: a string that does not read
// itself (hoststatus.Status does).
func isText(t reflect.Type) bool {
	return t.Kind() == reflect.String && !reflect.PointerTo(t).Implements(reflect.TypeFor[cellUnmarshaler]())
}

// fieldReader reads a cell into Row's field f. The field is found by its
// offset in Row (unsafe.Add): reflect.Value per cell cost a third of
// reading a file.
func fieldReader(f reflect.StructField) func(*Row, string, *interner) error {
	off := f.Offset
	at := func(row *Row) unsafe.Pointer { return unsafe.Add(unsafe.Pointer(row), off) }
	switch f.Type {
	case reflect.TypeFor[Number]():
		return func(row *Row, cell string, _ *interner) error {
			if v, ok := digits(cell); ok {
				*(*Number)(at(row)) = Num(float64(v)) // exact: under 2^53
				return nil
			}
			return (*Number)(at(row)).UnmarshalCSV(cell)
		}
	case reflect.TypeFor[Int]():
		return func(row *Row, cell string, _ *interner) error {
			if v, ok := digits(cell); ok {
				*(*Int)(at(row)) = IntOf(v)
				return nil
			}
			return (*Int)(at(row)).UnmarshalCSV(cell)
		}
	case reflect.TypeFor[Flag]():
		return func(row *Row, cell string, _ *interner) error { return (*Flag)(at(row)).UnmarshalCSV(cell) }
	case reflect.TypeFor[hoststatus.Status]():
		return func(row *Row, cell string, _ *interner) error {
			return (*hoststatus.Status)(at(row)).UnmarshalCSV(cell)
		}
	}
	switch {
	case reflect.PointerTo(f.Type).Implements(reflect.TypeFor[cellUnmarshaler]()):
		return func(row *Row, cell string, _ *interner) error {
			return reflect.NewAt(f.Type, at(row)).Interface().(cellUnmarshaler).UnmarshalCSV(cell)
		}
	case isText(f.Type):
		return func(row *Row, cell string, in *interner) error {
			*(*string)(at(row)) = in.get(unquoteText(cell))
			return nil
		}
	}
	panic(fmt.Sprintf("loaddata: Row.%s: cannot read a %s from a cell", f.Name, f.Type))
}

// digits is the value of a cell of 1 to 15 decimal digits alone, as
// Number's and Int's UnmarshalCSV read it; ok false for any other cell,
// which they read themselves. Most cells of a file are such numbers.
func digits(cell string) (v int64, ok bool) {
	if len(cell) == 0 || len(cell) > 15 {
		return 0, false
	}
	for i := 0; i < len(cell); i++ {
		c := cell[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

// stream is StreamFile for a reader; errors name the line and column.
func stream(r io.Reader, lim limits, add func(*Row)) (int, error) {
	return streamSized(r, lim, 0, add)
}

// streamSized is stream for a reader of about size bytes (0: not known),
// which sizes the interner's map: growing it row by row cost more than
// the rest of interning.
func streamSized(r io.Reader, lim limits, size int64, add func(*Row)) (int, error) {
	in := newBoundedReader(r, lim)
	// csv.Reader reads ahead through this buffer: at most readAhead bytes
	// past the record it is on.
	cr := csv.NewReader(bufio.NewReaderSize(in, readAhead))
	cr.ReuseRecord = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return 0, errors.New("the file is empty")
	}
	if err != nil {
		return 0, csvError(err, nil, 0)
	}
	header = slices.Clone(header) // the reader reuses its record
	readers, err := headerColumns(header)
	if err != nil {
		return 0, err
	}
	in.recordEnded(cr, header)
	// a string a GPU (its UUID) and few more: a row has some 250 bytes
	seen := make(map[string]string, min(size/256, 1<<17))
	interners := make([]interner, len(header)) // one a column, sharing seen
	for i := range interners {
		interners[i].m = seen
	}
	var row Row
	n := 0
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, csvError(err, rec, len(header))
		}
		row = Row{}
		for i, s := range rec {
			c := readers[i]
			if c == nil {
				continue
			}
			if err := c.read(&row, s, &interners[i]); err != nil {
				line, _ := cr.FieldPos(i)
				return n, fmt.Errorf("line %d (column %s): %w", line, header[i], err)
			}
		}
		in.recordEnded(cr, rec)
		n++
		add(&row)
	}
}

// headerColumns says how each of the file's columns is read; nil: not one
// of ours.
func headerColumns(header []string) ([]*column, error) {
	readers := make([]*column, len(header))
	found := map[string]bool{}
	for i, h := range header {
		if i == 0 {
			h = strings.TrimPrefix(h, "\uFEFF") // a byte order mark
		}
		if found[h] {
			return nil, fmt.Errorf("line 1: column %s appears twice", h)
		}
		found[h] = true
		for j := range columns {
			if columns[j].name == h {
				readers[i] = &columns[j]
			}
		}
	}
	var missing []string
	for _, c := range columns {
		if !found[c.name] && !optional[c.name] {
			missing = append(missing, c.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("line 1: not a load_data.csv header: no column %s", strings.Join(missing, ", "))
	}
	return readers, nil
}

// optional are the columns added after load_data.csv was first written:
// a file from an older fetch (or an old one given to render -import) reads
// with them empty.
var optional = map[string]bool{
	"slurm_job": true, "slurm_job_name": true, "slurm_partition": true, "slurm_account": true,
	"container": true, "container_name": true, "pod": true,
	"pstate": true, "ecc_mode": true, "ecc_uncorrected": true, "retired_pages_pending": true,
	"remapped_rows_pending": true, "remapped_rows_failure": true, "clock_events": true, "xids": true, "recovery_action": true,
	"process_sm_pct": true, "kernel_log": true, "gpu_vendor": true,
}

// csvError names the line of a syntax error. encoding/csv's Column is a
// byte offset in the line, not a field: it is given as such.
func csvError(err error, rec []string, fields int) error {
	var tl *tooLongError
	if errors.As(err, &tl) {
		return tl
	}
	var pe *csv.ParseError
	if !errors.As(err, &pe) {
		return err
	}
	if errors.Is(pe.Err, csv.ErrFieldCount) {
		return fmt.Errorf("line %d: %d fields, the header has %d", pe.Line, len(rec), fields)
	}
	from := ""
	if pe.StartLine != pe.Line {
		from = fmt.Sprintf(" (in the record from line %d)", pe.StartLine)
	}
	return fmt.Errorf("line %d, byte %d%s: %v", pe.Line, pe.Column, from, pe.Err)
}

// interner keeps one copy of each string: the CSV repeats host names,
// models, users and commands on many rows, and a cell read by encoding/csv
// shares memory with its whole line. A column has its own interner (over
// one map): its cell is most often the one above it, found without
// hashing.
type interner struct {
	m    map[string]string
	last string
}

func (in *interner) get(s string) string {
	if s == "" {
		return ""
	}
	if s == in.last {
		return in.last
	}
	v, ok := in.m[s]
	if !ok {
		v = strings.Clone(s)
		in.m[v] = v
	}
	in.last = v
	return v
}
