package holders

import "testing"

func TestParseStat(t *testing.T) {
	p := &Proc{}
	if !parseStat([]byte("4242 (my (odd) prog) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 193334 1000 1 18446744073709551615\n"), p) {
		t.Fatal("not parsed")
	}
	if p.PID != 4242 || p.Comm != "my (odd) prog" || p.PPID != 1 || p.PGID != 4242 || p.SID != 4242 || p.Start != 193334 || p.State != 'S' {
		t.Errorf("%+v", p)
	}
}
