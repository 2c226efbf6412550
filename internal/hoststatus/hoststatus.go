// Package hoststatus is the one vocabulary for how a host's poll ended: the
// words fetch writes in load_data.csv's host_status column, that render
// colours and counts, and that the SSH and nvidia-smi layers report.
package hoststatus

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
