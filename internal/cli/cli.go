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

// Errors are independent failures of one run (its outputs fail alone):
// Exit and Print give each its own line, and its own hint.
type Errors []error

func (e Errors) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e Errors) Unwrap() []error { return e }

// Join is nil when every err is nil, the one error when only one is not,
// else their Errors (nested ones flattened), in order.
func Join(errs ...error) error {
	var all Errors
	for _, err := range errs {
		many, isMany := err.(Errors)
		switch {
		case err == nil:
		case isMany:
			all = append(all, many...)
		default:
			all = append(all, err)
		}
	}
	switch len(all) {
	case 0:
		return nil
	case 1:
		return all[0]
	}
	return all
}

// Exit prints err as Print does and returns the exit code: 0 for nil, 2
// for a usage error, 1 otherwise.
func Exit(prog string, err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	Print(prog, err, stderr)
	var u *UsageError
	if errors.As(err, &u) {
		return 2
	}
	return 1
}

// Print writes err as "prog: error: ..." (lower case, no final period)
// and its hint as "prog: hint: ...": each of Errors on lines of its own.
func Print(prog string, err error, w io.Writer) {
	if many, ok := err.(Errors); ok {
		for _, e := range many {
			Print(prog, e, w)
		}
		return
	}
	msg := strings.TrimSuffix(err.Error(), ".")
	fmt.Fprintf(w, "%s: error: %s\n", prog, msg)
	if hint := Hint(err); hint != "" {
		fmt.Fprintf(w, "%s: hint: %s\n", prog, hint)
	}
}

// Hint is err's hint, or "".
func Hint(err error) string {
	if h, ok := errors.AsType[Hinted](err); ok {
		return h.Hint()
	}
	return ""
}
