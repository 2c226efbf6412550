package loaddata

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"strings"

	"github.com/gpumon/gpumon/internal/bytesize"
)

// limits bound what a file can make the reader hold and do.
type limits struct {
	record int64 // bytes in one record (a row, or the header)
	file   int64 // bytes in the whole file
}

// defaultLimits: a row is a few hundred bytes, a long command line some
// kilobytes (status.json keeps commands whole, so they are not cut). Today's
// file for 1,000 hosts is a few MB; 10,000 hosts × 8 GPUs × many processes
// stays well under 512 MiB, which is also about as much as render should
// spend seconds on.
var defaultLimits = limits{record: 1 << 20, file: 512 << 20}

// readAhead is the buffer between the boundedReader and csv.Reader: how far
// the csv.Reader can read past the record it is on.
const readAhead = 64 << 10

// A boundedReader passes a file on to csv.Reader and stops it with a
// *tooLongError as soon as a line is longer than a record may be, a record
// spans more than that (a quoted cell over many lines), or the file is over
// its size. So csv.Reader never buffers a huge record: memory stays about
// record + readAhead however long the file's lines are.
type boundedReader struct {
	r   io.Reader
	lim limits
	err error // once set, every Read returns it

	read      int64 // bytes passed on
	lines     int   // newlines passed on
	lineStart int64 // offset of the line being passed on

	// where the record csv.Reader reads next starts: set after each record
	recordStart int64
	recordLine  int
}

func newBoundedReader(r io.Reader, lim limits) *boundedReader {
	return &boundedReader{r: r, lim: lim, recordLine: 1}
}

// A tooLongError is a file past a limit, at a line.
type tooLongError struct {
	line int
	msg  string
}

func (e *tooLongError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.r.Read(p)
	n = b.pass(p[:n])
	if b.err != nil {
		return n, b.err
	}
	return n, err
}

// pass counts the bytes read and returns how many of them go on: all but
// those past the end of a line that is too long, or past the file's limit.
func (b *boundedReader) pass(p []byte) int {
	overFile := b.read+int64(len(p)) > b.lim.file
	if overFile {
		p = p[:b.lim.file-b.read]
	}
	if keep, ok := b.countLines(p); !ok {
		b.read += int64(keep)
		b.err = &tooLongError{line: b.lines + 1, msg: "a record longer than " + bytesize.Exact(b.lim.record)}
		return keep
	}
	b.read += int64(len(p))
	switch {
	case b.read-b.recordStart > b.lim.record+readAhead:
		b.err = &tooLongError{line: b.recordLine, msg: "a record longer than " + bytesize.Exact(b.lim.record)}
	case overFile:
		b.err = &tooLongError{line: b.lines + 1, msg: "the file goes on past " + bytesize.Exact(b.lim.file)}
	}
	return len(p)
}

var newline = []byte{'\n'}

// countLines counts the lines p ends and notes where the last one starts.
// If a line is too long, ok is false and keep is how much of p is within the
// limit (the lines before it are counted).
func (b *boundedReader) countLines(p []byte) (keep int, ok bool) {
	if b.read+int64(len(p))-b.lineStart <= b.lim.record {
		// no line in p can be over the limit: count them at once
		if k := bytes.Count(p, newline); k > 0 {
			b.lines += k
			b.lineStart = b.read + int64(bytes.LastIndexByte(p, '\n')) + 1
		}
		return len(p), true
	}
	for off := 0; ; {
		i := bytes.IndexByte(p[off:], '\n')
		end := len(p)
		if i >= 0 {
			end = off + i
		}
		if b.read+int64(end)-b.lineStart > b.lim.record {
			return int(b.lineStart + b.lim.record - b.read), false
		}
		if i < 0 {
			return len(p), true
		}
		b.lines++
		b.lineStart = b.read + int64(end) + 1
		off = end + 1
	}
}

// recordEnded notes that cr has returned rec: the next record starts after
// it (on the next line, unless blank lines come first).
func (b *boundedReader) recordEnded(cr *csv.Reader, rec []string) {
	b.recordStart = cr.InputOffset()
	last := len(rec) - 1
	line, _ := cr.FieldPos(last)
	b.recordLine = line + strings.Count(rec[last], "\n") + 1
}
