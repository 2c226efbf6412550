package history

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// A snapshot is kept as one compressed blob: at 1,000 hosts × 8 GPUs a row
// per GPU would be 2.3 million rows a day, a blob is one row of some tens
// of kilobytes. The format: a version byte, then varints and
// length-prefixed strings (encodeSnapshot says the order), all deflated.
// Version 2 adds each holder's SM utilization, version 3 each GPU's
// power and reservation and each holder's job and account; older blobs
// still decode, with those not known.
const snapshotVersion = 3

// Bounds on what a blob may claim, so that a damaged database cannot make
// the decoder allocate without end.
const (
	maxItems   = 1 << 20 // hosts, GPUs of a host, holders of a GPU
	maxString  = 1 << 16
	maxDecoded = 256 << 20
)

func encodeSnapshot(s *Snapshot) ([]byte, error) {
	var raw bytes.Buffer
	raw.WriteByte(snapshotVersion)
	w := &blobWriter{b: &raw}
	w.int(s.Time.Unix())
	w.uint(uint64(len(s.Hosts)))
	for _, h := range s.Hosts {
		w.str(h.Name)
		w.bool(h.Up)
		w.uint(uint64(len(h.GPUs)))
		for _, g := range h.GPUs {
			w.str(g.ID)
			w.str(g.Name)
			w.str(g.State)
			w.optFloat(g.UtilPct, g.HasUtil)
			w.float(g.MemUsedMiB)
			w.float(g.MemTotalMiB)
			w.bool(g.IdleJob)
			w.optFloat(g.PowerW, g.HasPower)
			w.str(g.ReservedFor)
			w.uint(uint64(len(g.Holders)))
			for _, hd := range g.Holders {
				w.str(hd.User)
				w.float(hd.MemMiB)
				w.optFloat(hd.SMPct, hd.HasSM)
				w.str(hd.Job)
				w.str(hd.Account)
			}
		}
	}
	encodeHealth(w, s)
	var out bytes.Buffer
	zw, err := flate.NewWriter(&out, flate.BestSpeed)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

var errDamaged = errors.New("damaged snapshot")

func decodeSnapshot(blob []byte) (*Snapshot, error) {
	raw, err := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(blob)), maxDecoded))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errDamaged, err)
	}
	if len(raw) == 0 || raw[0] < 1 || raw[0] > snapshotVersion {
		return nil, fmt.Errorf("%w: unknown version", errDamaged)
	}
	withSM, withPower := raw[0] >= 2, raw[0] >= 3
	r := &blobReader{b: raw[1:]}
	s := &Snapshot{Time: time.Unix(r.int(), 0).UTC()}
	s.Hosts = make([]Host, r.count())
	for i := range s.Hosts {
		h := &s.Hosts[i]
		h.Name = r.str()
		h.Up = r.bool()
		if n := r.count(); n > 0 {
			h.GPUs = make([]GPU, n)
		}
		for j := range h.GPUs {
			g := &h.GPUs[j]
			g.ID, g.Name, g.State = r.str(), r.str(), r.str()
			g.UtilPct, g.HasUtil = r.optFloat()
			g.MemUsedMiB = r.float()
			g.MemTotalMiB = r.float()
			g.IdleJob = r.bool()
			if withPower {
				g.PowerW, g.HasPower = r.optFloat()
				g.ReservedFor = r.str()
			}
			if n := r.count(); n > 0 {
				g.Holders = make([]Holder, n)
			}
			for k := range g.Holders {
				g.Holders[k] = Holder{User: r.str(), MemMiB: r.float()}
				if withSM {
					g.Holders[k].SMPct, g.Holders[k].HasSM = r.optFloat()
				}
				if withPower {
					g.Holders[k].Job, g.Holders[k].Account = r.str(), r.str()
				}
			}
		}
	}
	decodeHealth(r, s)
	if r.err != nil {
		return nil, r.err
	}
	return s, nil
}

type blobWriter struct {
	b   *bytes.Buffer
	tmp [binary.MaxVarintLen64]byte
}

func (w *blobWriter) uint(v uint64) { w.b.Write(binary.AppendUvarint(w.tmp[:0], v)) }
func (w *blobWriter) int(v int64)   { w.b.Write(binary.AppendVarint(w.tmp[:0], v)) }
func (w *blobWriter) str(s string) {
	if len(s) > maxString {
		s = s[:maxString]
	}
	w.uint(uint64(len(s)))
	w.b.WriteString(s)
}
func (w *blobWriter) bool(v bool) {
	if v {
		w.b.WriteByte(1)
	} else {
		w.b.WriteByte(0)
	}
}

// float keeps a tenth of a unit: MiB and percent need no more, and small
// integers compress far better than float bits.
func (w *blobWriter) float(v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		v = 0
	}
	w.int(int64(math.Round(v * 10)))
}

func (w *blobWriter) optFloat(v float64, ok bool) {
	w.bool(ok)
	if ok {
		w.float(v)
	}
}

// blobReader reads what blobWriter wrote; the first error sticks and
// every read after it returns zero values.
type blobReader struct {
	b   []byte
	err error
}

func (r *blobReader) fail() {
	if r.err == nil {
		r.err = fmt.Errorf("%w: truncated or corrupt", errDamaged)
	}
	r.b = nil
}

func (r *blobReader) uint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *blobReader) int() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *blobReader) count() int {
	n := r.uint()
	if n > maxItems || n > uint64(len(r.b)) { // each item takes a byte at least
		r.fail()
		return 0
	}
	return int(n)
}

func (r *blobReader) str() string {
	n := r.uint()
	if n > maxString || n > uint64(len(r.b)) {
		r.fail()
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *blobReader) bool() bool {
	if len(r.b) == 0 {
		r.fail()
		return false
	}
	v := r.b[0] != 0
	r.b = r.b[1:]
	return v
}

func (r *blobReader) float() float64 { return float64(r.int()) / 10 }

func (r *blobReader) optFloat() (float64, bool) {
	if !r.bool() {
		return 0, false
	}
	return r.float(), true
}

// The fold's state is kept as deflated JSON: it is small (the hosts' GPU
// lists and the spells in progress) and read once a run.
// stateGob marks a checkpoint in gob (since schema 3), ahead of its
// deflated stream: gob decodes 1,000 hosts' state in half the time JSON
// does, at every render. A deflate stream never starts with 'G' (0x47:
// its block type would be 3, which does not exist), so checkpoints saved
// before, deflated JSON, are still told apart and read.
const stateGob = 'G'

func encodeState(st *foldState) ([]byte, error) {
	var out bytes.Buffer
	out.WriteByte(stateGob)
	zw, err := flate.NewWriter(&out, flate.BestSpeed)
	if err != nil {
		return nil, err
	}
	if err := gob.NewEncoder(zw).Encode(st); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func decodeState(blob []byte) (*foldState, error) {
	st := &foldState{} // not newFoldState: a state saved without a version is of version 0
	var err error
	if len(blob) > 0 && blob[0] == stateGob {
		err = gob.NewDecoder(io.LimitReader(flate.NewReader(bytes.NewReader(blob[1:])), maxDecoded)).Decode(st)
	} else {
		err = json.NewDecoder(io.LimitReader(flate.NewReader(bytes.NewReader(blob)), maxDecoded)).Decode(st)
	}
	if err != nil {
		return nil, fmt.Errorf("damaged checkpoint: %v", err)
	}
	if st.Spells == nil {
		st.Spells = map[string]*Spell{}
	}
	if st.Hosts == nil {
		st.Hosts = map[string]*HostState{}
	}
	for k, h := range st.Hosts {
		if h == nil {
			delete(st.Hosts, k)
		}
	}
	for k, sp := range st.Spells {
		if sp == nil {
			delete(st.Spells, k)
		}
	}
	if st.Version < foldVersion {
		st.Spells = spellsPerHolder(st.Spells)
		st.Version = foldVersion
	}
	return st, nil
}

// spellsPerHolder turns the spells of a checkpoint saved before they were
// per holder (one per GPU, for its whole holder set) into one per holder,
// each from the same start: a spell in progress goes on across the
// upgrade. Each one's share of the GPU, and of the memory (known then only
// for all of them), is an equal part until the next reading tells.
func spellsPerHolder(old map[string]*Spell) map[string]*Spell {
	out := make(map[string]*Spell, len(old))
	for _, sp := range old {
		for _, u := range sp.Users {
			one := *sp
			one.Users = []string{u}
			one.MemMiB = sp.MemMiB / float64(len(sp.Users))
			one.Share = 1 / float64(len(sp.Users))
			one.Held = float64(sp.Seconds()) * one.Share
			out[spellKey(sp.Host, sp.GPU, u)] = &one
		}
	}
	return out
}
