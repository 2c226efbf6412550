package pagetest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A card whose hash is another card's (a host's text made to collide:
// CRCs are easy to forge) is not taken for that card: gpu01 turns busy in
// a render whose gpu01 card carries gpu02's hash, and the open page shows
// it busy, and gpu02 still once.
func TestForgedCardHashIsNotAnotherCard(t *testing.T) {
	s := newLiveSite(t)
	now := time.Now()
	s.render(t, fleet(now))
	tb := newTab(t, tabOptions{})
	tb.load(serve(t, s.www))
	tb.waitVisible(freeGPU)
	gpu02 := eval[string](tb, `document.querySelector('.host[data-host="gpu02"]').dataset.h`)

	next := newLiveSite(t)
	rows := fleet(now.Add(time.Minute))
	rows[0] = withProcess(rows[0], 5151, "alice", "python eval.py", 1000, 60)
	next.render(t, rows)
	page := filepath.Join(next.www, "index.html")
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte(`<section class=host data-h=`))
	if i < 0 || !bytes.HasPrefix(b[i+35:], []byte(" data-host=gpu01")) {
		t.Fatalf("the first card is not gpu01's: %.80q", b[max(i, 0):])
	}
	copy(b[i+27:i+35], gpu02) // the hash, 8 characters
	if err := os.WriteFile(page, b, 0o644); err != nil {
		t.Fatal(err)
	}
	next.moveTo(t, s)
	tb.waitJS(`document.querySelector(`+jsString(freeGPU)+`).getAttribute("data-state") === "busy"`, "gpu01's GPU 0 to turn busy")
	if n := eval[int](tb, `document.querySelectorAll('.host[data-host="gpu02"]').length`); n != 1 {
		t.Errorf("gpu02's card is on the page %d times", n)
	}
	tb.noProblems("a forged card hash")
}
