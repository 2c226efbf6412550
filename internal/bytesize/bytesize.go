// Package bytesize says how many bytes there are, in messages: a limit
// exactly ("1 MiB", "600 bytes"), an amount rounded ("3.4 MiB",
// "68.4 GiB").
package bytesize

import (
	"fmt"
	"math"
)

var units = []struct {
	size int64
	name string
}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}}

// Exact is n as a limit is stated: in the largest unit that divides it
// ("1 MiB", "64 KiB"), else in bytes ("1500 bytes"), never rounded.
func Exact(n int64) string {
	for _, u := range units {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// About is n as an amount is stated: to a tenth of the largest unit not
// above it ("3.4 MiB", "70.0 GiB"), bytes below 1 KiB. A value that
// rounds up to 1024 of a unit is told in the next ("1.0 MiB", not
// "1024.0 KiB").
func About(n int64) string {
	for i, u := range units {
		if n < u.size {
			continue
		}
		v := math.Round(float64(n)/float64(u.size)*10) / 10
		if v >= 1024 && i > 0 {
			u = units[i-1]
			v = math.Round(float64(n)/float64(u.size)*10) / 10
		}
		return fmt.Sprintf("%.1f %s", v, u.name)
	}
	return fmt.Sprintf("%d bytes", n)
}

// AboutMiB is About of an amount in MiB, as nvidia-smi gives GPU memory.
func AboutMiB(mib float64) string {
	return About(int64(math.Round(mib * (1 << 20))))
}
