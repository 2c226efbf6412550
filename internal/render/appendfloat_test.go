package render

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// appendFloat writes what strconv.FormatFloat(v, 'f', -1, 64) does, and
// appendJSONFloatp what encoding/json does, on either side of the
// whole-number shortcut and of encoding/json's exponent cutoffs: -0, 2^53
// and beyond, the readings a fleet has, and random numbers whole and not.
func TestAppendFloatIsFormatFloat(t *testing.T) {
	vals := []float64{0, math.Copysign(0, -1), 1, -1, 61000, 81559, 70.5, 1 << 53, 1<<53 + 2, -(1 << 53), 1<<53 - 1,
		1e21, 1e20, 123456789012345678, 0.1, 1e-6, 1e-7, 9.99e-7, -3.25e15, 1e-9, 1.5e-10, math.MaxFloat64, math.SmallestNonzeroFloat64}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		vals = append(vals, math.Round(r.NormFloat64()*math.Pow(10, float64(r.IntN(20)))),
			r.NormFloat64()*math.Pow(10, float64(r.IntN(40)-20)), math.Float64frombits(r.Uint64()))
	}
	for _, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		if got, want := string(appendFloat(nil, v)), strconv.FormatFloat(v, 'f', -1, 64); got != want {
			t.Fatalf("appendFloat(%v) = %s, want %s", v, got, want)
		}
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		ok := true
		if got := appendJSONFloatp(nil, &v, &ok); !ok || string(got) != string(want) {
			t.Fatalf("appendJSONFloatp(%v) = %s (ok %v), want %s", v, got, ok, want)
		}
	}
}
