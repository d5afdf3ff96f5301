package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"strconv"
	"unicode/utf8"
)

// ErrNotJSON reports a value that is not lossless JSON in the harness's sense
// (spec §2.4): malformed text, a non-finite number, negative zero, or an
// object with a duplicate key.
var ErrNotJSON = errors.New("messages: not lossless JSON")

// JSON is an immutable, validated JSON value held as compact canonical text.
//
// Canonical means: insignificant whitespace removed, every other byte kept as
// written (key order, number spelling, string escapes). Numbers never take a
// float64 detour, so a value round-trips byte for byte. The zero JSON holds no
// value; it encodes as null.
//
// JSON is a comparable value type and safe for concurrent use. Two values
// holding the same canonical text are ==; [JSON.Equal] compares semantically.
type JSON struct {
	text string
}

// ParseJSON validates b and returns it as a JSON value. It rejects what the
// harness rejects: anything that is not a single JSON text, numbers that are
// not finite as IEEE doubles, negative zero (-0, -0.0, -0e5), and objects with
// duplicate keys (JavaScript would silently keep the last one, so the key set
// would not survive a round trip). The caller keeps ownership of b.
func ParseJSON(b []byte) (JSON, error) {
	var buf bytes.Buffer
	buf.Grow(len(b))
	if err := json.Compact(&buf, b); err != nil {
		return JSON{}, fmt.Errorf("%w: %v", ErrNotJSON, err)
	}
	if err := validateLossless(buf.Bytes()); err != nil {
		return JSON{}, err
	}
	return JSON{text: buf.String()}, nil
}

// ParseJSONString is [ParseJSON] for a string.
func ParseJSONString(s string) (JSON, error) { return ParseJSON([]byte(s)) }

// MustParseJSON is [ParseJSONString] that panics on error. For literals in
// tests and tables.
func MustParseJSON(s string) JSON {
	j, err := ParseJSONString(s)
	if err != nil {
		panic(err)
	}
	return j
}

// MarshalValue encodes v with encoding/json and validates the result. It is
// how typed Go values become JSON payloads.
func MarshalValue[T any](v T) (JSON, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return JSON{}, fmt.Errorf("%w: %v", ErrNotJSON, err)
	}
	return ParseJSON(b)
}

// JSONString returns the JSON string literal for s.
func JSONString(s string) JSON {
	b, _ := json.Marshal(s) // a Go string always encodes
	return JSON{text: string(b)}
}

// JSONNull is the JSON literal null.
var JSONNull = JSON{text: "null"}

// IsZero reports whether j holds no value.
func (j JSON) IsZero() bool { return j.text == "" }

// String returns the canonical text ("" for the zero value).
func (j JSON) String() string { return j.text }

// Bytes returns a copy of the canonical text, owned by the caller.
func (j JSON) Bytes() []byte { return []byte(j.text) }

// Len is the length of the canonical text in bytes.
func (j JSON) Len() int { return len(j.text) }

// MarshalJSON implements json.Marshaler. The zero value encodes as null.
func (j JSON) MarshalJSON() ([]byte, error) {
	if j.text == "" {
		return []byte("null"), nil
	}
	return []byte(j.text), nil
}

// UnmarshalJSON implements json.Unmarshaler with the validation of ParseJSON.
func (j *JSON) UnmarshalJSON(b []byte) error {
	v, err := ParseJSON(b)
	if err != nil {
		return err
	}
	*j = v
	return nil
}

// Kind is the JSON type of a value.
type Kind uint8

// The JSON kinds. KindInvalid is the kind of the zero JSON.
const (
	KindInvalid Kind = iota
	KindNull
	KindBool
	KindNumber
	KindString
	KindArray
	KindObject
)

// Kind returns the JSON type of j.
func (j JSON) Kind() Kind {
	if j.text == "" {
		return KindInvalid
	}
	switch c := j.text[0]; {
	case c == 'n':
		return KindNull
	case c == 't' || c == 'f':
		return KindBool
	case c == '"':
		return KindString
	case c == '[':
		return KindArray
	case c == '{':
		return KindObject
	default:
		return KindNumber
	}
}

// Members iterates the members of an object in document order. It yields
// nothing when j is not an object.
func (j JSON) Members() iter.Seq2[string, JSON] {
	return func(yield func(string, JSON) bool) {
		if j.Kind() != KindObject {
			return
		}
		s := j.text
		i := 1
		for i < len(s) && s[i] != '}' {
			kEnd := skipValue(s, i)
			key, _ := strconv.Unquote(s[i:kEnd])
			if !isSimpleString(s[i:kEnd]) {
				_ = json.Unmarshal([]byte(s[i:kEnd]), &key)
			}
			vStart := kEnd + 1 // past ':'
			vEnd := skipValue(s, vStart)
			if !yield(key, JSON{text: s[vStart:vEnd]}) {
				return
			}
			i = vEnd
			if i < len(s) && s[i] == ',' {
				i++
			}
		}
	}
}

// Elements iterates the elements of an array in order. It yields nothing
// when j is not an array.
func (j JSON) Elements() iter.Seq[JSON] {
	return func(yield func(JSON) bool) {
		if j.Kind() != KindArray {
			return
		}
		s := j.text
		i := 1
		for i < len(s) && s[i] != ']' {
			end := skipValue(s, i)
			if !yield(JSON{text: s[i:end]}) {
				return
			}
			i = end
			if i < len(s) && s[i] == ',' {
				i++
			}
		}
	}
}

// Field returns the member named key of an object, and whether it exists.
func (j JSON) Field(key string) (JSON, bool) {
	for k, v := range j.Members() {
		if k == key {
			return v, true
		}
	}
	return JSON{}, false
}

// Keys returns the keys of an object in document order (nil otherwise).
// The returned slice is owned by the caller.
func (j JSON) Keys() []string {
	var keys []string
	for k := range j.Members() {
		keys = append(keys, k)
	}
	return keys
}

// AsString returns the value of a JSON string, and whether j is one.
func (j JSON) AsString() (string, bool) {
	if j.Kind() != KindString {
		return "", false
	}
	if isSimpleString(j.text) {
		return j.text[1 : len(j.text)-1], true
	}
	var s string
	if err := json.Unmarshal([]byte(j.text), &s); err != nil {
		return "", false
	}
	return s, true
}

// AsInt returns the value of a JSON number that is an integer within the
// safe-integer range of the harness (|n| ≤ 2^53-1), and whether it is one.
// 1.0 and 1e2 count as integers, as they do in JavaScript.
func (j JSON) AsInt() (int64, bool) {
	if j.Kind() != KindNumber {
		return 0, false
	}
	if n, err := strconv.ParseInt(j.text, 10, 64); err == nil {
		return n, n <= maxSafeInt && n >= -maxSafeInt
	}
	f, err := strconv.ParseFloat(j.text, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > maxSafeInt {
		return 0, false
	}
	return int64(f), true
}

// AsBool returns the value of a JSON boolean, and whether j is one.
func (j JSON) AsBool() (bool, bool) {
	switch j.text {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// Equal reports whether j and o are the same JSON value: objects compare as
// key sets (order-insensitive), arrays element-wise, numbers by their value as
// IEEE doubles (so 1 equals 1.0, as in JavaScript), strings by content.
func (j JSON) Equal(o JSON) bool {
	if j.text == o.text {
		return true
	}
	if j.Kind() != o.Kind() {
		return false
	}
	switch j.Kind() {
	case KindNumber:
		a, _ := strconv.ParseFloat(j.text, 64)
		b, _ := strconv.ParseFloat(o.text, 64)
		return a == b
	case KindString:
		a, _ := j.AsString()
		b, _ := o.AsString()
		return a == b
	case KindArray:
		next, stop := iter.Pull(o.Elements())
		defer stop()
		for a := range j.Elements() {
			b, ok := next()
			if !ok || !a.Equal(b) {
				return false
			}
		}
		_, more := next()
		return !more
	case KindObject:
		m := make(map[string]JSON)
		for k, v := range o.Members() {
			m[k] = v
		}
		n := 0
		for k, v := range j.Members() {
			w, ok := m[k]
			if !ok || !v.Equal(w) {
				return false
			}
			n++
		}
		return n == len(m)
	}
	return false // null and bools have one spelling each; text differed
}

const maxSafeInt = 1<<53 - 1

// isSimpleString reports whether a quoted string literal has no escapes, so
// its content is the bytes between the quotes.
func isSimpleString(lit string) bool {
	for i := 1; i < len(lit)-1; i++ {
		if lit[i] == '\\' {
			return false
		}
	}
	return true
}

// skipValue returns the index just past the JSON value starting at s[i].
// s must be compact, valid JSON (validated at construction).
func skipValue[T ~string | ~[]byte](s T, i int) int {
	switch s[i] {
	case '"':
		i++
		for s[i] != '"' {
			if s[i] == '\\' {
				i++
			}
			i++
		}
		return i + 1
	case '{', '[':
		depth := 0
		for ; i < len(s); i++ {
			switch s[i] {
			case '"':
				i = skipValue(s, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return i
	default:
		for i < len(s) && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ':' {
			i++
		}
		return i
	}
}

// validateLossless walks compact, syntactically valid JSON and enforces the
// harness's extra rules. It is iterative: no depth limit beyond memory.
func validateLossless(s []byte) error {
	type frame struct {
		object bool
		keys   map[string]struct{}
	}
	var stack []frame
	expectKey := false
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '{':
			stack = append(stack, frame{object: true})
			expectKey = true
			i++
		case c == '[':
			stack = append(stack, frame{})
			expectKey = false
			i++
		case c == '}' || c == ']':
			stack = stack[:len(stack)-1]
			i++
		case c == ',':
			expectKey = len(stack) > 0 && stack[len(stack)-1].object
			i++
		case c == ':':
			expectKey = false
			i++
		case c == '"':
			end := skipValue(s, i)
			if !utf8.Valid(s[i:end]) {
				return fmt.Errorf("%w: invalid UTF-8 in string", ErrNotJSON)
			}
			if expectKey {
				top := &stack[len(stack)-1]
				var key string
				if err := json.Unmarshal(s[i:end], &key); err != nil {
					return fmt.Errorf("%w: %v", ErrNotJSON, err)
				}
				if top.keys == nil {
					top.keys = make(map[string]struct{})
				}
				if _, dup := top.keys[key]; dup {
					return fmt.Errorf("%w: duplicate key %q", ErrNotJSON, key)
				}
				top.keys[key] = struct{}{}
				expectKey = false
			}
			i = end
		case c == 't' || c == 'f' || c == 'n':
			for i < len(s) && s[i] >= 'a' && s[i] <= 'z' {
				i++
			}
		default: // number
			start := i
			for i < len(s) && s[i] != ',' && s[i] != '}' && s[i] != ']' {
				i++
			}
			if err := checkNumber(string(s[start:i])); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkNumber rejects numbers JavaScript cannot hold losslessly as a value
// the harness accepts: overflow to ±Infinity and negative zero.
func checkNumber(lit string) error {
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return fmt.Errorf("%w: bad number %s", ErrNotJSON, lit)
	}
	if math.IsInf(f, 0) {
		return fmt.Errorf("%w: number %s is not finite", ErrNotJSON, lit)
	}
	if f == 0 && math.Signbit(f) {
		return fmt.Errorf("%w: negative zero %s", ErrNotJSON, lit)
	}
	return nil
}
