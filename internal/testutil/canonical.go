package testutil

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// EventsSha256 is the eventsSha256 of the SQLite fixtures' manifest
// (testdata/sqlite/README.md) for a session's logical events, given as one
// JSON object each: every event written as canonical JSON (keys sorted, no
// whitespace, strings escaped only where JSON must, numbers as
// encoding/json prints them) and a newline, all hashed with SHA-256, in
// hex.
func EventsSha256(events [][]byte) (string, error) {
	h := sha256.New()
	var b bytes.Buffer
	for i, e := range events {
		var v any
		if err := json.Unmarshal(e, &v); err != nil {
			return "", fmt.Errorf("event %d: %w", i, err)
		}
		b.Reset()
		if err := canonical(&b, v); err != nil {
			return "", fmt.Errorf("event %d: %w", i, err)
		}
		b.WriteByte('\n')
		h.Write(b.Bytes())
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func canonical(b *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case map[string]any:
		b.WriteByte('{')
		for i, k := range slices.Sorted(maps.Keys(x)) {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := canonical(b, k); err != nil {
				return err
			}
			b.WriteByte(':')
			if err := canonical(b, x[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := canonical(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case string:
		var s bytes.Buffer
		enc := json.NewEncoder(&s)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(x); err != nil {
			return err
		}
		b.Write(bytes.TrimSuffix(s.Bytes(), []byte("\n")))
	default:
		out, err := json.Marshal(x)
		if err != nil {
			return err
		}
		b.Write(out)
	}
	return nil
}
