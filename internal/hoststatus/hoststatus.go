// Package hoststatus is the one vocabulary for how a host's poll ended: the
// words fetch writes in load_data.csv's host_status column, that render
// colours and counts, and that the SSH and nvidia-smi layers report.
package hoststatus

import (
	"fmt"
	"strings"
)

// Status is a host's outcome. Anything but OK means the host's GPU cells are
// empty and host_error says why in plain words.
type Status string

const (
	OK          Status = "ok"
	Unreachable Status = "unreachable" // refused, no route, name not found
	Timeout     Status = "timeout"     // no complete answer within the host's timeout
	Auth        Status = "auth"        // no key was accepted
	HostKey     Status = "hostkey"     // unknown host or changed host key
	Driver      Status = "driver"      // nvidia-smi could not talk to the driver, or no GPU
	Error       Status = "error"       // anything else (broken output, too much output, bad config for the host)
)

// All lists the statuses in the order the docs give them.
var All = []Status{OK, Unreachable, Timeout, Auth, HostKey, Driver, Error}

// UnmarshalCSV reads a status from load_data.csv, refusing a word that is
// not one of All: a typo or a forged cell must not pass for a host that
// failed for no reason anyone can read.
func (s *Status) UnmarshalCSV(v string) error {
	for _, st := range All {
		if v == string(st) {
			*s = st
			return nil
		}
	}
	words := make([]string, len(All))
	for i, st := range All {
		words[i] = string(st)
	}
	return fmt.Errorf("%q is not a host status (%s)", v, strings.Join(words, ", "))
}
