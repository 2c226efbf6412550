package nvsmi

import (
	"fmt"
	"strings"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/hosttext"
)

// Diagnose looks at one nvidia-smi run's combined output (stdout and stderr)
// and exit status, as the shell saw it, and returns nil when the output is
// usable, even with some bad lines (the parsers report those).
//
// Exit codes come from the wrapper as much as from nvidia-smi: `timeout`
// gives 124, or 137 when it had to KILL; the shell gives 127 for a missing
// command. nvidia-smi exits 15 when one GPU is lost while it still prints the
// others, so a non-zero exit with CSV after the header is still usable.
func Diagnose(out []byte, exitCode int) *HostError {
	if exitCode == 124 || exitCode == 137 {
		return &HostError{Status: hoststatus.Timeout, Message: "nvidia-smi did not answer in time (killed by timeout)"}
	}
	header, after := csvHeader(out)
	if header && exitCode == 0 {
		return nil
	}
	if exitCode == 127 {
		return notFound()
	}
	lower := strings.ToLower(string(out))
	switch {
	case strings.Contains(lower, "communicate with the nvidia driver"):
		return &HostError{Status: hoststatus.Driver, Message: "NVIDIA driver not loaded (nvidia-smi could not communicate with the driver)"}
	case strings.Contains(lower, "driver/library version mismatch"):
		return &HostError{Status: hoststatus.Driver, Message: "NVIDIA driver/library version mismatch (reboot or reload the driver)"}
	case strings.Contains(lower, "no devices were found"):
		return &HostError{Status: hoststatus.Driver, Message: "no NVIDIA GPU found"}
	case strings.Contains(lower, "is not a valid field to query"):
		return &HostError{Status: hoststatus.Error, Message: fmt.Sprintf(
			"nvidia-smi does not know the field %q (the driver is probably older than the query needs)", invalidField(out))}
	}
	if header {
		if after {
			return nil
		}
		return &HostError{Status: hoststatus.Error, Message: fmt.Sprintf("nvidia-smi failed (exit %d) after printing only the CSV header", exitCode)}
	}
	// Only without a header: with one, "not found" could be part of a
	// process name.
	if strings.Contains(lower, "not found") {
		return notFound()
	}
	first := strings.TrimSuffix(hosttext.FirstLine(string(out)), ".")
	switch {
	case exitCode == 0 && first == "":
		return &HostError{Status: hoststatus.Error, Message: "nvidia-smi printed nothing"}
	case exitCode == 0:
		return &HostError{Status: hoststatus.Error, Message: "nvidia-smi printed no CSV header: " + first}
	case first == "":
		return &HostError{Status: hoststatus.Error, Message: fmt.Sprintf("nvidia-smi failed (exit %d) with no output", exitCode)}
	}
	return &HostError{Status: hoststatus.Error, Message: fmt.Sprintf("nvidia-smi failed (exit %d): %s", exitCode, first)}
}

func notFound() *HostError {
	return &HostError{Status: hoststatus.Driver, Message: "nvidia-smi not found on the host"}
}

// csvHeader reports whether out has a CSV header line and whether any
// non-blank line follows it (rows, or messages about lost GPUs).
func csvHeader(out []byte) (header, after bool) {
	for _, l := range splitLines(out) {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if header {
			return true, true
		}
		header = isHeader(l)
	}
	return header, false
}

// isHeader tells a CSV header from a message. A single word is a header only
// when it looks like a field name: nvidia-smi's messages are sentences, but a
// one-word line ("Killed") could be anything.
func isHeader(line string) bool {
	names, _, ok := parseHeader(line)
	if !ok {
		return false
	}
	if len(names) > 1 {
		return true
	}
	n := names[0]
	return n == "index" || n == "pid" || strings.ContainsAny(n, "._")
}

// invalidField picks x out of `Field "x" is not a valid field to query.`
func invalidField(out []byte) string {
	for _, l := range splitLines(out) {
		i := strings.Index(l, "is not a valid field to query")
		if i < 0 {
			continue
		}
		head := l[:i]
		if a := strings.IndexByte(head, '"'); a >= 0 {
			if b := strings.LastIndexByte(head, '"'); b > a {
				return hosttext.Clip(hosttext.Printable(head[a+1:b]), 64)
			}
		}
		return hosttext.Clip(hosttext.Printable(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(head), "Field"))), 64)
	}
	return "?"
}
