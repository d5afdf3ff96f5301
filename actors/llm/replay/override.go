package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/dshgo/dsh/messages"
)

// OverrideFileName is the name of the override sidecar that FromFile
// applies when it sits beside the log file.
const OverrideFileName = "replay.override.json"

// Override is a parsed replay.override.json, the corpus'
// sidecar (testdata/harness/README.md). It takes one of two
// forms:
//
//	[entry, ...]                          replaces the whole script: the k-th call gets entry k
//	{"patches": [{"at": k, "entry": e}]}  replaces entry k of the script (k = its length appends)
//
// and an entry is one of
//
//	{"kind": "chunks", "chunks": [chunk, ...]}
//	{"kind": "throw", "chunks": [chunk, ...], "message": m, "code": c}
//	{"kind": "hang", "readyFile": path}   (readyFile optional)
//
// A bare array replaces the recorded script rather than a prefix of it:
// that is what makes the patch form necessary in the reference, and in
// every corpus scenario the two readings agree (each array is as long as
// the recorded script, or the recording has no finished stream).
//
// Parsing is strict: an unknown kind, a field that does not belong to the
// entry's kind, a chunk that does not parse (messages.ParseStreamChunk) or a
// failure without message or code is an error. Chunks keep their canonical
// JSON. The zero Override changes nothing. An Override is immutable and
// safe for concurrent use.
type Override struct {
	replace bool
	entries []Entry // replace
	patches []patch
}

type patch struct {
	at    int
	entry Entry
}

// ReadOverride reads and parses an override file.
func ReadOverride(path string) (Override, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Override{}, fmt.Errorf("replay: read override: %w", err)
	}
	o, err := ParseOverride(data)
	if err != nil {
		return Override{}, fmt.Errorf("%w (%s)", err, path)
	}
	return o, nil
}

// ParseOverride parses the content of an override file. The caller keeps
// ownership of data.
func ParseOverride(data []byte) (Override, error) {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 {
		return Override{}, errors.New("replay: override: empty")
	}
	switch trimmed[0] {
	case '[':
		var raws []json.RawMessage
		if err := strictUnmarshal(data, &raws); err != nil {
			return Override{}, fmt.Errorf("replay: override: %w", err)
		}
		o := Override{replace: true, entries: make([]Entry, 0, len(raws))}
		for i, raw := range raws {
			e, err := parseEntry(raw)
			if err != nil {
				return Override{}, fmt.Errorf("replay: override entry %d: %w", i, err)
			}
			o.entries = append(o.entries, e)
		}
		return o, nil
	case '{':
		var doc struct {
			Patches *[]struct {
				At    *int            `json:"at"`
				Entry json.RawMessage `json:"entry"`
			} `json:"patches"`
		}
		if err := strictUnmarshal(data, &doc); err != nil {
			return Override{}, fmt.Errorf("replay: override: %w", err)
		}
		if doc.Patches == nil {
			return Override{}, errors.New("replay: override: an object override needs patches")
		}
		var o Override
		for i, p := range *doc.Patches {
			if p.At == nil || *p.At < 0 {
				return Override{}, fmt.Errorf("replay: override patch %d: at must be a non-negative integer", i)
			}
			if p.Entry == nil {
				return Override{}, fmt.Errorf("replay: override patch %d: no entry", i)
			}
			e, err := parseEntry(p.Entry)
			if err != nil {
				return Override{}, fmt.Errorf("replay: override patch %d: %w", i, err)
			}
			o.patches = append(o.patches, patch{at: *p.At, entry: e})
		}
		return o, nil
	}
	return Override{}, errors.New("replay: override is neither an array of entries nor an object with patches")
}

func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the override")
	}
	return nil
}

// parseEntry parses one ReplayEntry.
func parseEntry(raw json.RawMessage) (Entry, error) {
	var r struct {
		Kind      string             `json:"kind"`
		Chunks    *[]json.RawMessage `json:"chunks"`
		Message   *string            `json:"message"`
		Code      *string            `json:"code"`
		ReadyFile *string            `json:"readyFile"`
	}
	if err := strictUnmarshal(raw, &r); err != nil {
		return Entry{}, err
	}
	foreign := func(fields ...string) error {
		present := map[string]bool{"chunks": r.Chunks != nil, "message": r.Message != nil,
			"code": r.Code != nil, "readyFile": r.ReadyFile != nil}
		for _, f := range fields {
			if present[f] {
				return fmt.Errorf("field %s does not belong to a %s entry", f, r.Kind)
			}
		}
		return nil
	}
	chunks := func() ([]messages.StreamChunk, error) {
		if r.Chunks == nil {
			return nil, nil
		}
		out := make([]messages.StreamChunk, 0, len(*r.Chunks))
		for i, cr := range *r.Chunks {
			j, err := messages.ParseJSON(cr)
			if err != nil {
				return nil, fmt.Errorf("chunk %d: %w", i, err)
			}
			c, err := messages.ParseStreamChunk(j)
			if err != nil {
				return nil, fmt.Errorf("chunk %d: %w", i, err)
			}
			out = append(out, c)
		}
		return out, nil
	}
	switch Kind(r.Kind) {
	case KindChunks:
		if err := foreign("message", "code", "readyFile"); err != nil {
			return Entry{}, err
		}
		if r.Chunks == nil {
			return Entry{}, errors.New("a chunks entry needs chunks")
		}
		cs, err := chunks()
		if err != nil {
			return Entry{}, err
		}
		return Entry{kind: KindChunks, chunks: cs}, nil
	case KindThrow:
		if err := foreign("readyFile"); err != nil {
			return Entry{}, err
		}
		cs, err := chunks()
		if err != nil {
			return Entry{}, err
		}
		var f messages.LlmFailure
		if r.Message != nil {
			f.Message = *r.Message
		}
		if r.Code != nil {
			f.Code = *r.Code
		}
		if err := f.Validate(); err != nil {
			return Entry{}, fmt.Errorf("throw entry: %w", err)
		}
		return Entry{kind: KindThrow, chunks: cs, failure: f}, nil
	case KindHang:
		if err := foreign("chunks", "message", "code"); err != nil {
			return Entry{}, err
		}
		e := Entry{kind: KindHang}
		if r.ReadyFile != nil {
			e.readyFile = *r.ReadyFile
		}
		return e, nil
	case "":
		return Entry{}, errors.New("entry has no kind")
	}
	return Entry{}, fmt.Errorf("unknown entry kind %q", r.Kind)
}

// IsZero reports whether o changes nothing.
func (o Override) IsZero() bool { return !o.replace && len(o.patches) == 0 }

// Apply returns script with the override applied; script is not modified.
// A patch may replace an existing entry or append at the end; one further
// out is an error.
func (o Override) Apply(script []Entry) ([]Entry, error) {
	if o.replace {
		return slices.Clone(o.entries), nil
	}
	out := slices.Clone(script)
	for _, p := range o.patches {
		switch {
		case p.at < len(out):
			out[p.at] = p.entry
		case p.at == len(out):
			out = append(out, p.entry)
		default:
			return nil, fmt.Errorf("replay: override patch at %d is beyond the %d scripted calls", p.at, len(out))
		}
	}
	return out, nil
}
