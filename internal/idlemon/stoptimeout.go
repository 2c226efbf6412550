package idlemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/cgroup"
	"github.com/gpumon/gpumon/internal/idlemon/config"
)

// idlemon's stop takes up to grace_seconds (SIGTERM to its jobs, SIGKILL
// after it) and a little more; systemd waits TimeoutStopSec for it, then
// kills idlemon in the middle of the stop. A grace_seconds that the unit's
// TimeoutStopSec does not leave room for is refused before anything runs.
const (
	unitName = "idlemon.service"
	// stopMargin is what a stop needs beyond grace_seconds: the SIGKILL,
	// the jobs' exit, the last state file.
	stopMargin = 5 * time.Second
	// shippedStopTimeout is dist/idlemon.service's TimeoutStopSec, assumed
	// where systemctl cannot tell the unit's.
	shippedStopTimeout = 30 * time.Second
	// hintMargin is what the hint adds to grace_seconds: more than
	// stopMargin, for a loaded host.
	hintMargin = 15 * time.Second
)

// systemctlShow asks systemd for unit's load state and stop timeout
// (`systemctl show -p LoadState -p TimeoutStopUSec unit`): the load state
// because systemd answers with its default timeout for a unit it does not
// have. A variable: tests answer for it.
var systemctlShow = func(unit string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "systemctl", "show", "-p", "LoadState", "-p", "TimeoutStopUSec", unit).Output()
	return string(out), err
}

// stopTimeout is how long systemd waits for idlemon to stop.
type stopTimeout struct {
	d        time.Duration // unless infinite
	infinite bool
	assumed  string // why the shipped unit's is assumed, or ""
	// noSystemd says why there is no systemd here (no systemctl, not PID
	// 1): nothing kills idlemon in the middle of a stop, whatever its grace.
	noSystemd string
	unit      string // the unit asked about; "" = unitName
}

func (s stopTimeout) unitName() string {
	if s.unit == "" {
		return unitName
	}
	return s.unit
}

func (s stopTimeout) String() string {
	switch {
	case s.noSystemd != "":
		return "no stop timeout (" + s.noSystemd + ")"
	case s.assumed != "":
		return "the shipped unit's TimeoutStopSec (" + seconds(s.d) + ")"
	case s.infinite:
		return "the TimeoutStopSec of " + s.unitName() + " (infinity)"
	}
	return "the TimeoutStopSec of " + s.unitName() + " (" + seconds(s.d) + ")"
}

// why says, after a message, why the shipped unit's timeout is assumed.
func (s stopTimeout) why() string {
	if s.assumed == "" {
		return ""
	}
	return " (assumed: " + s.assumed + ")"
}

// seconds prints d as systemd and the config count it: 75s, 0.5s.
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

// findStopTimeout is idlemon.service's stop timeout as systemctl tells it;
// the shipped unit's where it cannot (no systemctl, no systemd as PID 1,
// the unit not installed); none where systemd is not there at all.
func findStopTimeout() stopTimeout {
	unit := runningUnit()
	out, err := systemctlShow(unit)
	st := stopTimeoutFrom(out, err)
	st.unit = unit
	return st
}

// runningUnit is the unit idlemon runs as under systemd (a second idlemon
// for AMD GPUs runs as a copy of the unit under another name), else
// idlemon.service, the shipped unit that check speaks for.
func runningUnit() string {
	if os.Getenv("INVOCATION_ID") == "" {
		return unitName
	}
	m, err := cgroup.ReadMembership("/proc", os.Getpid())
	if err != nil {
		return unitName
	}
	base := path.Base(strings.TrimSuffix(m.V2, "/supervisor"))
	if !strings.HasSuffix(base, ".service") {
		return unitName
	}
	return base
}

// stopTimeoutFrom reads systemctl show's answer (out, err).
func stopTimeoutFrom(out string, err error) stopTimeout {
	props := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			props[k] = v
		}
	}
	var why string
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return stopTimeout{noSystemd: "no systemctl"}
	case err != nil && strings.Contains(firstLine(err), "not been booted with systemd"):
		return stopTimeout{noSystemd: "systemd is not running"}
	case err != nil:
		why = "systemctl: " + firstLine(err)
	case props["LoadState"] != "loaded":
		why = fmt.Sprintf("%s is not loaded (LoadState=%q)", unitName, props["LoadState"])
	default:
		d, infinite, perr := parseTimespan(props["TimeoutStopUSec"])
		if perr == nil {
			return stopTimeout{d: d, infinite: infinite}
		}
		why = "TimeoutStopUSec: " + perr.Error()
	}
	return stopTimeout{d: shippedStopTimeout, assumed: why}
}

// firstLine is err's message up to its first line end: an exec error
// carries systemctl's stderr.
func firstLine(err error) string {
	msg := err.Error()
	var exit *exec.ExitError
	if errors.As(err, &exit) && len(exit.Stderr) > 0 {
		msg = strings.TrimSpace(string(exit.Stderr))
	}
	msg, _, _ = strings.Cut(msg, "\n")
	return msg
}

// checkStopTimeout refuses a grace_seconds that, with stopMargin, does not
// fit in the unit's stop timeout.
func checkStopTimeout(cfg *config.Config) error {
	return checkGraceFits(cfg, findStopTimeout())
}

func checkGraceFits(cfg *config.Config, st stopTimeout) error {
	if st.infinite || st.noSystemd != "" || cfg.Grace+stopMargin <= st.d {
		return nil
	}
	e := cfg.ErrorAt("defaults", "grace_seconds", "%s and a %s margin do not fit in %s: systemd would kill idlemon in the middle of a stop%s",
		seconds(cfg.Grace), seconds(stopMargin), st, st.why())
	want := time.Duration(math.Ceil((cfg.Grace + hintMargin).Seconds())) * time.Second
	e.HintText = fmt.Sprintf("run systemctl edit %s and add the lines [Service] and TimeoutStopSec=%s", strings.TrimSuffix(st.unitName(), ".service"), seconds(want))
	if fits := st.d - stopMargin; fits > 0 {
		e.HintText += "; or lower grace_seconds to " + strings.TrimSuffix(seconds(fits), "s") + " or less"
	}
	return e
}

// describeStopTimeout prints what check found of the stop timeout.
func describeStopTimeout(w io.Writer, grace time.Duration) {
	st := findStopTimeout()
	if st.noSystemd != "" {
		fmt.Fprintf(w, "stop: %s: nothing limits how long a stop takes; under systemd, grace_seconds (%s) and a %s margin must fit in the unit's TimeoutStopSec\n", st, seconds(grace), seconds(stopMargin))
		return
	}
	fmt.Fprintf(w, "stop: grace_seconds (%s) and a %s margin fit in %s%s\n", seconds(grace), seconds(stopMargin), st, st.why())
}

// systemd's time span units, as `systemctl show` prints them.
var spanUnits = map[string]time.Duration{
	"us": time.Microsecond, "µs": time.Microsecond, "ms": time.Millisecond, "s": time.Second,
	"min": time.Minute, "h": time.Hour, "d": 24 * time.Hour, "w": 7 * 24 * time.Hour,
	"month": 2629800 * time.Second, "y": 31557600 * time.Second,
}

// parseTimespan reads a systemd time span as `systemctl show` prints one:
// "30s", "1min 30s", "1.500000s", "0", "infinity".
func parseTimespan(s string) (d time.Duration, infinite bool, err error) {
	s = strings.TrimSpace(s)
	switch s {
	case "":
		return 0, false, errors.New("empty")
	case "infinity":
		return 0, true, nil
	case "0":
		return 0, false, nil
	}
	for _, tok := range strings.Fields(s) {
		i := strings.IndexFunc(tok, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
		if i <= 0 {
			return 0, false, fmt.Errorf("%q is not a time span", s)
		}
		unit, ok := spanUnits[tok[i:]]
		n, perr := strconv.ParseFloat(tok[:i], 64)
		if !ok || perr != nil {
			return 0, false, fmt.Errorf("%q is not a time span", s)
		}
		d += time.Duration(n * float64(unit))
	}
	return d, false, nil
}
