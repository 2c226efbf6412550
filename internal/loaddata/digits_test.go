package loaddata

import "testing"

// digits, stream's shortcut for cells of digits alone, reads a cell as
// Number's and Int's UnmarshalCSV do, or leaves it to them.
func TestDigitsReadsAsUnmarshalCSV(t *testing.T) {
	for _, cell := range []string{"0", "7", "007", "81559", "123456789012345", "999999999999999",
		"1234567890123456", "", " 1", "1 ", "1.5", "-1", "-0", "+1", "1e3", "0x10", "1_000", "١"} {
		t.Run(cell, func(t *testing.T) {
			v, ok := digits(cell)
			if !ok {
				return // read by UnmarshalCSV itself
			}
			var n Number
			var i Int
			if err := n.UnmarshalCSV(cell); err != nil || n != Num(float64(v)) {
				t.Errorf("digits: %d; Number reads %v (%v)", v, n, err)
			}
			if err := i.UnmarshalCSV(cell); err != nil || i != IntOf(v) {
				t.Errorf("digits: %d; Int reads %v (%v)", v, i, err)
			}
		})
	}
}
