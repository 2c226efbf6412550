package rocm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/gpumon/gpumon/internal/hosttext"
)

// Bounds on what one tool answer can make the parser hold. A 64-GPU
// `amd-smi metric --json` is about 1.5 MB and nests 5 deep; past these the
// answer is not a GPU tool's and is refused before it is decoded.
const (
	maxInput = 8 << 20 // bytes looked at
	maxDepth = 32      // nesting of objects and lists
	// maxStarts is how many lines that open with '{' or '[' are tried
	// before giving up: warnings before the JSON are a few lines, not
	// thousands.
	maxStarts = 64
)

var errTooDeep = errors.New("JSON nested more than 32 deep")

// findJSON returns the first JSON object or list that starts a line of out
// and is whole, with what came before it (warnings: the probe merges
// stderr) and after it ignored. The nesting is checked token by token
// first, so a thousand-deep answer is refused without recursing into it.
func findJSON(out []byte) ([]byte, error) {
	if len(out) > maxInput {
		return nil, fmt.Errorf("answer of %d bytes, more than the %d read", len(out), maxInput)
	}
	starts := 0
	for line := 0; line < len(out) && starts < maxStarts; {
		next := bytes.IndexByte(out[line:], '\n')
		if next < 0 {
			next = len(out)
		} else {
			next += line + 1
		}
		start := line
		for start < next && (out[start] == ' ' || out[start] == '\t') {
			start++
		}
		if start < next && (out[start] == '{' || out[start] == '[') {
			starts++
			n, err := scanValue(out[start:])
			if err == nil {
				return out[start : start+n], nil
			}
			if errors.Is(err, errTooDeep) {
				return nil, err
			}
		}
		line = next
	}
	if first := hosttext.FirstLine(string(out)); first != "" {
		return nil, fmt.Errorf("no JSON in the answer, which begins %q", first)
	}
	return nil, errors.New("empty answer")
}

// scanValue walks one JSON value at the start of b without building it and
// returns its length, or errTooDeep as soon as it nests past maxDepth.
func scanValue(b []byte) (int, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	depth := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return 0, io.ErrUnexpectedEOF
		}
		if err != nil {
			return 0, err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if depth++; depth > maxDepth {
				return 0, errTooDeep
			}
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return int(dec.InputOffset()), nil
		}
	}
}

// decodeJSON finds the JSON in out and decodes it with numbers kept as
// text, so that 2^64 is seen for what it is rather than rounded.
func decodeJSON(out []byte) (any, error) {
	raw, err := findJSON(out)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("JSON not understood: %v", err)
	}
	return v, nil
}
