package idlemon

import (
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/idlemon/config"
)

func firstWord(s string) string {
	if i := strings.IndexByte(s, ' '); i >= 0 {
		s = s[:i]
	}
	return filepath.Base(s)
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// fmtDur prints a duration the way people say it: 30s, 1.5s, 250ms, 5m0s.
func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return strconv.FormatFloat(d.Round(100*time.Millisecond).Seconds(), 'f', -1, 64) + "s"
	default:
		return d.Round(time.Millisecond).String()
	}
}

// vendorName is how messages name a vendor.
func vendorName(vendor string) string {
	if vendor == config.VendorAMD {
		return "AMD"
	}
	return "NVIDIA"
}
