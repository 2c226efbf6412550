package render

import (
	"bytes"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/loaddata"
)

// cardHashes is each card's data-h on the page, by host.
func cardHashes(t testing.TB, page []byte) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, m := range regexp.MustCompile(`<section class=host data-h=([\w-]{8}) data-host=([\w.-]+)`).FindAllSubmatch(page, -1) {
		got[string(m[2])] = string(m[1])
	}
	if len(got) == 0 {
		t.Fatal("no card has a hash")
	}
	return got
}

// statePage writes the page and page-state.json of rows at now.
func statePage(t testing.TB, rows []loaddata.Row, now time.Time) (page []byte, state pageState) {
	t.Helper()
	rep := testReport(t, rows, "")
	rep.Now = now
	plan := planPages(rep)
	var b, s bytes.Buffer
	if err := HTML(&b, rep); err != nil {
		t.Fatal(err)
	}
	if err := writePageState(&s, rep, plan); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(s.Bytes(), &state); err != nil {
		t.Fatalf("page-state.json: %v\n%s", err, s.Bytes())
	}
	return b.Bytes(), state
}

// A card's hash changes with its card only; the page's hash in the state
// changes with any card, not with the time the page was made, and is the
// page's own (data-v), so that an open page knows when it is behind.
func TestPageStateHashes(t *testing.T) {
	rows := readRows(t, "testdata/load_data.csv")
	page, state := statePage(t, rows, testNow)
	again, later := statePage(t, rows, testNow.Add(10*time.Second))
	if diff := cmp.Diff(state.Pages, later.Pages); diff != "" {
		t.Errorf("the same data made later changed the page's hash (-first +later):\n%s", diff)
	}
	sum := state.Pages["index.html"]
	if len(sum) != hashLen || !bytes.Contains(page, []byte(` data-v="`+sum+`"`)) {
		t.Errorf("the page does not carry its hash %q from page-state.json (%v)", sum, state.Pages)
	}
	if diff := cmp.Diff(cardHashes(t, page), cardHashes(t, again)); diff != "" {
		t.Errorf("cards' hashes differ between two renders of the same data:\n%s", diff)
	}
	changed := append([]loaddata.Row(nil), rows...)
	host := changed[0].Host
	changed[0].GPUUtilPct = loaddata.Num(changed[0].GPUUtilPct.Value + 13)
	page2, state2 := statePage(t, changed, testNow)
	before, after := cardHashes(t, page), cardHashes(t, page2)
	for h := range before {
		if (before[h] != after[h]) != (h == host) {
			t.Errorf("host %s: hash %s then %s; only %s's card changed", h, before[h], after[h], host)
		}
	}
	if state2.Pages["index.html"] == sum {
		t.Errorf("a card changed and the page's hash did not")
	}
	if state.V != 1 || state.Build != buildHash || state.RefreshS != 60 || state.StaleAfterS != 900 {
		t.Errorf("page-state.json: %+v", state)
	}
}
