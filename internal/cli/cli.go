// Package cli holds what the three commands share at their edge: how an
// error reaches the terminal and which exit code it maps to.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Hinted is an error that knows the fix.
type Hinted interface {
	error
	Hint() string
}

type hinted struct {
	err  error
	hint string
}

func (h *hinted) Error() string { return h.err.Error() }
func (h *hinted) Unwrap() error { return h.err }
func (h *hinted) Hint() string  { return h.hint }

// WithHint attaches a hint line to err.
func WithHint(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return &hinted{err: err, hint: fmt.Sprintf(format, args...)}
}

// UsageError is a bad command line; it exits 2, like flag's own errors.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Exit prints err as "prog: error: ..." (lower case, no final period), its
// hint as "prog: hint: ...", and returns the exit code: 0 for nil, 2 for a
// usage error, 1 otherwise.
func Exit(prog string, err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	msg := strings.TrimSuffix(err.Error(), ".")
	fmt.Fprintf(stderr, "%s: error: %s\n", prog, msg)
	var h Hinted
	if errors.As(err, &h) && h.Hint() != "" {
		fmt.Fprintf(stderr, "%s: hint: %s\n", prog, h.Hint())
	}
	var u *UsageError
	if errors.As(err, &u) {
		return 2
	}
	return 1
}
