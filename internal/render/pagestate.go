package render

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"io"
	"path/filepath"
	"time"
)

// page-state.json is what an open page's script fetches at each refresh
// instead of reloading itself: one hash a page, over everything the page
// shows but the time it was made and the data's age, which the script
// counts itself. A page whose hash differs fetches itself and swaps the
// cards whose data-h differ, and its frame (summary, warnings, users,
// history) when the body's data-h differs.
//
// Only pages' hashes, not each card's: the script must fetch its page to
// swap anything, and it learns there which cards changed, so a card's
// hash here would only make the file grow with the fleet (about 25 bytes
// a host) for nothing. The file stays a few hundred bytes at 10,000 hosts.
type pageState struct {
	V           int               `json:"v"`
	Time        string            `json:"time,omitempty"` // the data's, RFC 3339; absent when unknown
	Generated   string            `json:"generated"`
	StaleAfterS int               `json:"stale_after_s"`
	RefreshS    int               `json:"refresh_s"`
	Build       string            `json:"build"` // an open page of another build reloads
	Pages       map[string]string `json:"pages"` // a page's file, from the state's folder: its hash
}

// pageStatePath is where page-state.json goes for the page at html: beside
// it; nowhere when the page is not written.
func pageStatePath(html string) string {
	if html == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(html), PageState)
}

// writePageState writes page-state.json for the pages of plan.
func writePageState(w io.Writer, r *Report, plan *pagePlan) error {
	s := pageState{V: 1, Generated: r.Now.UTC().Format(time.RFC3339),
		StaleAfterS: int(r.Config.StaleAfter / time.Second), RefreshS: int(r.Config.Refresh / time.Second),
		Build: buildHash, Pages: plan.hashes}
	if a := r.age(); a >= 0 && !r.Cluster.DataTime.IsZero() {
		s.Time = r.Cluster.DataTime.UTC().Format(time.RFC3339)
	}
	return json.NewEncoder(w).Encode(&s)
}

// hashLen is the length of a hash on the page and in page-state.json: 8
// characters of base64url, 48 bits. Only a card's (or a page's) old and
// new hash are compared: a chance collision keeps one change off an open
// page until the next; cards are told apart by their hosts' names, which
// they contain.
const hashLen = 8

// shortHash is how a hash is written on the page and in the state.
func shortHash(v uint64) string {
	var sum [8]byte
	binary.BigEndian.PutUint64(sum[:], v)
	return base64.RawURLEncoding.EncodeToString(sum[2:])
}

// changeHash is the hash of the cards and pages: two CRC-32s (Castagnoli
// and IEEE, both in hardware), 64 bits at about 8 GB/s, where FNV-64 took
// a sixth of a 10,000-host render. It tells a change, it does not resist
// a forgery: a process that made its card's CRCs collide with the card's
// last ones would keep that card from updating until anything else on it
// changes (its memory, its elapsed time); a reload shows it as it is. One
// made to collide with another card's is not taken for it: page.js
// parses every card of a hash that two cards have.
type changeHash struct{ c, i uint32 }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (h *changeHash) Write(p []byte) (int, error) {
	h.c = crc32.Update(h.c, castagnoli, p)
	h.i = crc32.Update(h.i, crc32.IEEETable, p)
	return len(p), nil
}

func (h *changeHash) Sum64() uint64 { return uint64(h.c)<<32 | uint64(h.i) }

// cardHash is a card's hash, over its markup after `<section class=host`.
func cardHash(card []byte) string {
	var h changeHash
	h.Write(card)
	return shortHash(h.Sum64())
}

// pageLinks says where a page is in the site, for its script: its key in
// page-state.json and the state's address from the page.
type pageLinks struct {
	key, state string
}

// frameHash is the hash of a page's frame: the view's templates as they
// would be written with neither the time the page was made nor the data's
// age, which change at every render and which the script writes itself,
// then parts (what Go writes around the templates: the finder, the
// overview's boxes, the history).
func frameHash(v *pageView, parts ...[]byte) string {
	blank := *v
	blank.Generated, blank.Age, blank.Stale, blank.Hash, blank.Sum = "", "", false, "", ""
	blank.CSP, blank.CSS, blank.JS, blank.Build = "", "", "", "" // the build's hash has them
	if v.Age != "" {
		blank.NoTimeText = "" // shown only without an age; it has the time of the render
	}
	var h changeHash
	w := bufio.NewWriter(&h)
	for _, name := range []string{"head", "tail", "end"} {
		if err := pageTmpl.ExecuteTemplate(w, name, &blank); err != nil {
			panic(err) // the template and its data are ours
		}
	}
	for _, p := range parts {
		w.Write(p)
	}
	w.Flush()
	return shortHash(h.Sum64())
}

// pageSum is a page's hash in page-state.json: its frame's and its cards'
// in order, so that a card added, gone or changed changes it.
func pageSum(frame string, cards []string) string {
	var h changeHash
	io.WriteString(&h, frame)
	for _, c := range cards {
		io.WriteString(&h, c)
	}
	return shortHash(h.Sum64())
}
