// Package loaddata is load_data.csv: the file fetch writes and render reads.
// One row per GPU per process; a GPU with no process is one row with empty
// process cells; a failed host is one row with empty GPU cells. A reading
// that nvidia-smi could not give is an empty cell, never 0.
package loaddata

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"github.com/gpumon/gpumon/internal/sitefiles"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gocarina/gocsv"

	"github.com/gpumon/gpumon/internal/bytesize"
	"github.com/gpumon/gpumon/internal/hoststatus"
)

// TimeFormat is how timestamps are written: RFC 3339 in UTC.
const TimeFormat = time.RFC3339

// The values of Row.GPUVendor.
const (
	VendorNVIDIA = "nvidia"
	VendorAMD    = "amd"
)

// Row is one line of load_data.csv. The csv tags are the column names and
// their order is the file's column order: gocsv writes by them, and the
// reader's table (columns, in stream.go) is made from them.
type Row struct {
	Timestamp  string            `csv:"timestamp"`
	Host       string            `csv:"host"`
	HostStatus hoststatus.Status `csv:"host_status"`
	HostError  string            `csv:"host_error"`

	GPUIndex Int    `csv:"gpu_index"`
	GPUUUID  string `csv:"gpu_uuid"`
	GPUName  string `csv:"gpu_name"`
	// GPUVendor is whose tool reported the GPU: VendorNVIDIA, VendorAMD,
	// or empty in a file from an older fetch (which read nvidia-smi only).
	GPUVendor   string `csv:"gpu_vendor"`
	GPUBusID    string `csv:"gpu_bus_id"`
	GPUError    string `csv:"gpu_error"`
	GPUUtilPct  Number `csv:"gpu_util_pct"`
	MemUtilPct  Number `csv:"mem_util_pct"`
	MemUsedMiB  Number `csv:"mem_used_mib"`
	MemTotalMiB Number `csv:"mem_total_mib"`
	TempC       Number `csv:"temperature_c"`
	PowerW      Number `csv:"power_w"`
	PowerLimitW Number `csv:"power_limit_w"`
	FanPct      Number `csv:"fan_pct"`

	// The GPU's health readings, as the host's driver gave them (empty
	// where it gave none, or the driver has no such field): render's
	// [health] policy decides what they mean (package health).
	// ClockEvents is the active clock event (throttle) reasons, named
	// (health.ClockEventNames), space-separated, "none" when none is
	// active. XIDs is the XID codes the kernel logged for this GPU since
	// the last poll, ascending, comma-separated; whether the log could be
	// read is the host's kernel_log cell.
	PState              Int    `csv:"pstate"`
	ECCMode             string `csv:"ecc_mode"`
	ECCUncorrected      Number `csv:"ecc_uncorrected"`
	RetiredPagesPending Tri    `csv:"retired_pages_pending"`
	RemappedRowsPending Tri    `csv:"remapped_rows_pending"`
	RemappedRowsFailure Tri    `csv:"remapped_rows_failure"`
	ClockEvents         string `csv:"clock_events"`
	XIDs                string `csv:"xids"`
	// RecoveryAction is the driver's gpu_recovery_action: "none", what it
	// asks for ("reset", "reboot", "drain_p2p", "drain_and_reset", ...,
	// "unknown" for a word fetch does not know), or empty. It stays set
	// until the GPU is reset or the node rebooted.
	RecoveryAction string `csv:"recovery_action"`

	PID             Int    `csv:"pid"`
	User            string `csv:"user"`
	Command         string `csv:"command"`
	ProcessMemMiB   Number `csv:"process_mem_mib"`
	ProcessElapsedS Int    `csv:"process_elapsed_s"`
	// Preemptible marks a process of idlemon's idle-time job: it leaves the
	// moment anyone else opens the GPU, so the GPU counts as free.
	Preemptible Flag `csv:"preemptible"`
	// ProcessSMPct is the process's own SM utilization (nvidia-smi pmon):
	// empty where the driver gives none (MIG, pmon off or failed).
	ProcessSMPct Number `csv:"process_sm_pct"`

	// Who the process runs for, from its cgroup (empty when not known):
	// the Slurm job (as squeue prints it: "1233_5" for an array task) with
	// its name, partition and account where squeue answered, and the
	// container (12 hex digits), its name where docker/podman ps answered,
	// and the Kubernetes pod's uid. Files written before these columns
	// existed read as empty.
	SlurmJob       string `csv:"slurm_job"`
	SlurmJobName   string `csv:"slurm_job_name"`
	SlurmPartition string `csv:"slurm_partition"`
	SlurmAccount   string `csv:"slurm_account"`
	Container      string `csv:"container"`
	ContainerName  string `csv:"container_name"`
	Pod            string `csv:"pod"`

	CPUs            Int    `csv:"cpus"`
	Load1           Number `csv:"load1"`
	HostMemUsedMiB  Number `csv:"host_mem_used_mib"`
	HostMemTotalMiB Number `csv:"host_mem_total_mib"`
	// KernelLog says where the host's XIDs were read: "journal",
	// "dmesg", "unreadable: <why>", or empty when not asked.
	KernelLog string `csv:"kernel_log"`
}

// Number is a reading that may be missing; missing is an empty cell.
type Number struct {
	Value float64
	Valid bool
}

// Num returns a present reading.
func Num(v float64) Number { return Number{Value: v, Valid: true} }

// MarshalCSV writes the shortest text that reads back as the same value.
func (n Number) MarshalCSV() (string, error) {
	if !n.Valid {
		return "", nil
	}
	return strconv.FormatFloat(n.Value, 'f', -1, 64), nil
}

// UnmarshalCSV keeps an empty cell apart from 0.
func (n *Number) UnmarshalCSV(s string) error {
	s = strings.TrimSpace(s)
	if s == "" {
		*n = Number{}
		return nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("%q is not a number", s)
	}
	*n = Num(v)
	return nil
}

// Int is a count or an id that may be missing.
type Int struct {
	Value int64
	Valid bool
}

// IntOf returns a present value.
func IntOf(v int64) Int { return Int{Value: v, Valid: true} }

// MarshalCSV writes the decimal value, or nothing.
func (n Int) MarshalCSV() (string, error) {
	if !n.Valid {
		return "", nil
	}
	return strconv.FormatInt(n.Value, 10), nil
}

// UnmarshalCSV keeps an empty cell apart from 0.
func (n *Int) UnmarshalCSV(s string) error {
	s = strings.TrimSpace(s)
	if s == "" {
		*n = Int{}
		return nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not a whole number", s)
	}
	*n = IntOf(v)
	return nil
}

// Flag is a yes/no cell: "yes" or empty.
type Flag bool

// MarshalCSV writes "yes" or nothing.
func (f Flag) MarshalCSV() (string, error) {
	if f {
		return "yes", nil
	}
	return "", nil
}

// UnmarshalCSV reads "yes" (or "true", "1") as set and an empty cell as unset.
func (f *Flag) UnmarshalCSV(s string) error {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		*f = false
	case "yes", "true", "1":
		*f = true
	case "no", "false", "0":
		*f = false
	default:
		return fmt.Errorf("%q is not yes or empty", s)
	}
	return nil
}

// Tri is a yes/no reading that may be missing: "yes", "no" or empty.
type Tri struct {
	Value bool
	Valid bool
}

// TriOf returns a present reading.
func TriOf(v bool) Tri { return Tri{Value: v, Valid: true} }

// MarshalCSV writes "yes", "no" or nothing.
func (t Tri) MarshalCSV() (string, error) {
	switch {
	case !t.Valid:
		return "", nil
	case t.Value:
		return "yes", nil
	}
	return "no", nil
}

// UnmarshalCSV keeps an empty cell apart from "no".
func (t *Tri) UnmarshalCSV(s string) error {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		*t = Tri{}
	case "yes", "true", "1":
		*t = TriOf(true)
	case "no", "false", "0":
		*t = TriOf(false)
	default:
		return fmt.Errorf("%q is not yes, no or empty", s)
	}
	return nil
}

// Encode writes rows with a header line.
func Encode(w io.Writer, rows []Row) error {
	if rows == nil {
		rows = []Row{}
	}
	return gocsv.MarshalCSV(&rows, formulaQuoter{gocsv.NewSafeCSVWriter(csv.NewWriter(w))})
}

// Text a host chose (a process's name, a job's) reaches whoever opens
// load_data.csv in a spreadsheet, which runs a cell that starts with one
// of formulaStarts as a formula ("=cmd|' /C calc'!A0"). So a text cell
// that starts with one of them, or with the quote itself, is written with
// a ' before it (OWASP's advice: spreadsheets show such a cell as text),
// and the reader takes exactly one leading ' off every text cell: the
// file means what it meant, for render as for any tool that does the same
// (docs/load_data.md). Number cells are never quoted: "-3" stays a number.
const formulaStarts = "=+-@\t\r'"

// quoteText is a text cell as written.
func quoteText(s string) string {
	if s != "" && strings.IndexByte(formulaStarts, s[0]) >= 0 {
		return "'" + s
	}
	return s
}

// unquoteText is a text cell as read: quoteText undone.
func unquoteText(s string) string { return strings.TrimPrefix(s, "'") }

// formulaQuoter writes records with their text cells quoted (quoteText).
type formulaQuoter struct{ gocsv.CSVWriter }

func (q formulaQuoter) Write(rec []string) error {
	for i, cell := range rec {
		if i < len(columns) && columns[i].text {
			rec[i] = quoteText(cell)
		}
	}
	return q.CSVWriter.Write(rec)
}

// WriteFile replaces path with rows atomically: a temporary file in the same
// folder, fsync, mode 0644 (nginx must read it), rename. A reader sees the old
// file or the new one, never a part. The temporary file is in path's folder
// even when $TMPDIR is on the same file system (renameio would use $TMPDIR):
// a run killed while writing leaves its part beside the output, where the
// next run's files are, not in the system's temporary folder.
func WriteFile(path string, rows []Row) error {
	return writeAtomically(path, func(w io.Writer) error { return Encode(w, rows) })
}

// Records is rows as CSV records without the header line: one part of a
// file that WriteFileRecords puts together. fetch keeps each host's rows
// this way while the others answer: a few hundred bytes a row instead of a
// Row's 600, and nothing for the collector to trace.
func Records(rows []Row) ([]byte, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	e := recordEncoders.Get().(*recordEncoder)
	defer recordEncoders.Put(e)
	e.buf.Reset()
	if err := gocsv.MarshalCSVWithoutHeaders(&rows, e.w); err != nil {
		return nil, err
	}
	return bytes.Clone(e.buf.Bytes()), nil
}

// recordEncoder is a CSV writer kept with its buffer: made anew for each
// host, the writer's own buffer alone came to 40 MB of garbage a run of
// 10,000 hosts.
type recordEncoder struct {
	buf bytes.Buffer
	w   formulaQuoter
}

var recordEncoders = sync.Pool{New: func() any {
	e := new(recordEncoder)
	e.w = formulaQuoter{gocsv.NewSafeCSVWriter(csv.NewWriter(&e.buf))}
	return e
}}

// WriteFileRecords is WriteFile for rows made records (Records), in parts:
// the file holds the header and the parts in order, byte for byte what
// WriteFile writes for the same rows.
func WriteFileRecords(path string, parts [][]byte) error {
	return writeAtomically(path, func(w io.Writer) error {
		if err := Encode(w, nil); err != nil { // the header alone
			return err
		}
		bw := bufio.NewWriterSize(w, 64<<10)
		for _, p := range parts {
			if _, err := bw.Write(p); err != nil {
				return err
			}
		}
		return bw.Flush()
	})
}

func writeAtomically(path string, write func(io.Writer) error) error {
	var w *limitedWriter
	err := sitefiles.Write(path, func(f io.Writer) error {
		w = &limitedWriter{w: f, lim: defaultLimits}
		return write(w)
	})
	if err != nil && w != nil && w.err != nil {
		return fmt.Errorf("%w; the previous file is kept", w.err)
	}
	return err
}

// RemoveLeftovers removes the temporary files that WriteFile left beside
// path when a run was killed while writing: sitefiles' own, and those of
// older versions (".load_data.csv" and digits). Call it only while
// holding the lock that keeps other writers of path away: it cannot tell
// a leftover from a file being written.
func RemoveLeftovers(path string) error {
	dir, prefix := filepath.Dir(path), "."+filepath.Base(path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		old := ok && rest != "" && strings.Trim(rest, "0123456789") == ""
		if !e.Type().IsRegular() || !old && !sitefiles.IsLeftover(e.Name(), filepath.Base(path)) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// A limitedWriter refuses to write what the reader would refuse (a line
// over the record limit, a file over the file limit), so a file that is
// written can always be read.
type limitedWriter struct {
	w       io.Writer
	lim     limits
	written int64
	line    int64 // bytes since the last newline
	lines   int
	err     error
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	if l.written+int64(len(p)) > l.lim.file {
		l.err = fmt.Errorf("would be more than %s, more than render reads", bytesize.Exact(l.lim.file))
		return 0, l.err
	}
	for rest := p; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			l.line += int64(len(rest))
			break
		}
		l.line += int64(i)
		if l.line > l.lim.record {
			break
		}
		l.line, l.lines, rest = 0, l.lines+1, rest[i+1:]
	}
	if l.line > l.lim.record {
		l.err = fmt.Errorf("line %d would be more than %s, more than render reads", l.lines+1, bytesize.Exact(l.lim.record))
		return 0, l.err
	}
	n, err := l.w.Write(p)
	l.written += int64(n)
	return n, err
}

// ReadFile reads path; errors start with the path.
func ReadFile(path string) ([]Row, error) {
	var rows []Row
	if _, err := StreamFile(path, func(row *Row) { rows = append(rows, *row) }); err != nil {
		return nil, err
	}
	return rows, nil
}
