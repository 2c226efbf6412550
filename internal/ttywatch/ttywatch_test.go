package ttywatch

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestUtmpLines(t *testing.T) {
	rec := func(typ int16, line string) []byte {
		b := make([]byte, utmpSize)
		binary.LittleEndian.PutUint16(b, uint16(typ))
		copy(b[utLineOffset:], line)
		return b
	}
	var data []byte
	data = append(data, rec(2, "~")...) // BOOT_TIME
	data = append(data, rec(utUserProcess, "pts/3")...)
	data = append(data, rec(8, "pts/4")...) // DEAD_PROCESS
	data = append(data, rec(utUserProcess, "tty1")...)
	data = append(data, rec(utUserProcess, ":0")...)
	data = append(data, rec(utUserProcess, "../etc/passwd")...)
	data = append(data, 1, 2, 3) // a torn record
	p := filepath.Join(t.TempDir(), "utmp")
	os.WriteFile(p, data, 0o644)
	if got := utmpLines(p); !reflect.DeepEqual(got, []string{"pts/3", "tty1"}) {
		t.Errorf("got %q", got)
	}
	if got := utmpLines(p + ".missing"); got != nil {
		t.Errorf("missing utmp: %q", got)
	}
}
