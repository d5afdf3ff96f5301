package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrNotJSON reports a value that is not lossless JSON in the harness's sense
// (docs/session-log.md#lossless-json): malformed text, a non-finite number,
// negative zero, or an object with a duplicate key.
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
// harness rejects: anything that is not a single JSON text (malformed, empty,
// trailing garbage, invalid UTF-8), numbers that are not finite as IEEE
// doubles (1e400), negative zero (-0, -0.0, -0e5, and -1e-400, which
// underflows to -0), and objects with duplicate keys at any depth (JavaScript
// would silently keep the last one, so the key set would not survive a round
// trip). Keys are compared as JavaScript compares them, as UTF-16 strings:
// "\u00e9" and "é" are the same key, two different lone surrogates are not.
//
// Validation is a single iterative pass with no nesting limit beyond memory
// (the harness's snapshotJsonValue has none either); encoding/json's scanner,
// used here before, refused anything nested deeper than 10,000 levels. The
// caller keeps ownership of b.
func ParseJSON(b []byte) (JSON, error) {
	compact, err := scanLossless(b)
	if err != nil {
		return JSON{}, err
	}
	if compact {
		return JSON{text: string(b)}, nil
	}
	return JSON{text: string(appendCompact(make([]byte, 0, len(b)), b))}, nil
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
// how typed Go values become JSON payloads. HTML characters (<, >, &) are
// written as they are, as JavaScript's JSON.stringify writes them, not as
// \u003c escapes. v is read, not retained.
//
// It is generic rather than taking an any so that the package's exported API
// holds no dynamically typed value (STYLE.md, enforced by internal/lint); a
// call site reads the same either way.
func MarshalValue[T any](v T) (JSON, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return JSON{}, fmt.Errorf("%w: %v", ErrNotJSON, err)
	}
	return ParseJSON(bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}))
}

// JSONString returns the JSON string literal for s, escaped as
// [AppendQuoted] escapes it (invalid UTF-8 becomes U+FFFD).
func JSONString(s string) JSON {
	return JSON{text: string(AppendQuoted(make([]byte, 0, len(s)+2), s))}
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
// nothing when j is not an object. Keys are decoded to Go strings; a key
// holding a lone UTF-16 surrogate escape (legal JSON, not representable in
// UTF-8) yields U+FFFD in its place, as encoding/json does.
func (j JSON) Members() iter.Seq2[string, JSON] {
	return func(yield func(string, JSON) bool) {
		if j.Kind() != KindObject {
			return
		}
		for lit, v := range rawMembers(j.text) {
			if !yield(unquote(lit), JSON{text: v}) {
				return
			}
		}
	}
}

// rawMembers iterates the members of a compact object as (quoted key
// literal, value text) pairs, without decoding anything.
func rawMembers(s string) iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		i := 1
		for i < len(s) && s[i] != '}' {
			kEnd := skipValue(s, i)
			vStart := kEnd + 1 // past ':'
			vEnd := skipValue(s, vStart)
			if !yield(s[i:kEnd], s[vStart:vEnd]) {
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
	// A plain loop rather than ranging over Members: Field is on every
	// parse path, and the iterator's state would cost an allocation a call.
	if j.Kind() != KindObject {
		return JSON{}, false
	}
	s := j.text
	for i := 1; i < len(s) && s[i] != '}'; {
		kEnd := skipString(s, i)
		vEnd := skipValue(s, kEnd+1)
		if unquote(s[i:kEnd]) == key {
			return JSON{text: s[kEnd+1 : vEnd]}, true
		}
		i = vEnd
		if i < len(s) && s[i] == ',' {
			i++
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

// AsString returns the value of a JSON string, and whether j is one. A lone
// UTF-16 surrogate escape decodes to U+FFFD, as in encoding/json.
func (j JSON) AsString() (string, bool) {
	if j.Kind() != KindString {
		return "", false
	}
	return unquote(j.text), true
}

// AsInt returns the value of a JSON number that is an integer within the
// safe-integer range of the harness (|n| ≤ 2^53-1), and whether it is one.
// 1.0 and 1e2 count as integers, as they do in JavaScript.
func (j JSON) AsInt() (int64, bool) {
	if n, ok := shortInt(j.text); ok {
		return n, true
	}
	if j.Kind() != KindNumber {
		return 0, false
	}
	if n, err := strconv.ParseInt(j.text, 10, 64); err == nil {
		if n > maxSafeInt || n < -maxSafeInt {
			return 0, false
		}
		return n, true
	}
	f, err := strconv.ParseFloat(j.text, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > maxSafeInt {
		return 0, false
	}
	return int64(f), true
}

// shortInt reads a number written as at most 15 digits, optionally
// negative: the seqs, times, turns and gaps of a log, which AsInt reads
// by the thousand. Such a number is below 10^15 < 2^53 in magnitude, so
// it is a safe integer, and strconv would read the same value. Anything
// else (more digits, a fraction or exponent, not a number) is left to the
// general path.
func shortInt(s string) (int64, bool) {
	digits := s
	if len(s) > 0 && s[0] == '-' {
		digits = s[1:]
	}
	if len(digits) == 0 || len(digits) > 15 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if len(digits) < len(s) {
		n = -n
	}
	return n, true
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
// IEEE doubles (so 1 equals 1.0, as in JavaScript), strings and keys by their
// UTF-16 content (so "\u00e9" equals "é", and two different lone surrogates
// differ).
//
// It recurses once per nesting level, on the goroutine's growable stack. The
// cost is linear in the size of the values for shallow data; a pathological
// value nested d levels deep costs O(d·n), because each level skips over its
// children textually. Values equal as text return at once whatever their
// depth.
func (j JSON) Equal(o JSON) bool { return equalText(j.text, o.text) }

func equalText(a, b string) bool {
	if a == b {
		return true
	}
	ka, kb := kindOf(a), kindOf(b)
	if ka != kb {
		return false
	}
	switch ka {
	case KindNumber:
		x, _ := strconv.ParseFloat(a, 64)
		y, _ := strconv.ParseFloat(b, 64)
		return x == y
	case KindString:
		if isSimpleString(a) && isSimpleString(b) {
			return false // no escapes, so different text is different content
		}
		return bytes.Equal(appendUnquoted(nil, a, true), appendUnquoted(nil, b, true))
	case KindArray:
		i, k := 1, 1
		for {
			endA, endB := a[i] == ']', b[k] == ']'
			if endA || endB {
				return endA && endB
			}
			ea, eb := skipValue(a, i), skipValue(b, k)
			if !equalText(a[i:ea], b[k:eb]) {
				return false
			}
			i, k = ea, eb
			if a[i] == ',' {
				i++
			}
			if b[k] == ',' {
				k++
			}
		}
	case KindObject:
		// Index b's members by decoded key. Objects are small in practice, so
		// a slice searched linearly beats a map up to a handful of members.
		type member struct{ key, val string }
		var bm []member
		for lit, v := range rawMembers(b) {
			bm = append(bm, member{keyText(lit), v})
		}
		var index map[string]string
		if len(bm) > 8 {
			index = make(map[string]string, len(bm))
			for _, m := range bm {
				index[m.key] = m.val
			}
		}
		n := 0
		for lit, v := range rawMembers(a) {
			key := keyText(lit)
			var w string
			found := false
			if index != nil {
				w, found = index[key]
			} else {
				for _, m := range bm {
					if m.key == key {
						w, found = m.val, true
						break
					}
				}
			}
			if !found || !equalText(v, w) {
				return false
			}
			n++
		}
		return n == len(bm)
	}
	return false // null and bools have one spelling each; text differed
}

// keyText returns the comparable form of a quoted key literal: its content
// as WTF-8 (UTF-8 that also encodes lone surrogates), so keys compare as
// JavaScript compares them.
func keyText(lit string) string {
	if isSimpleString(lit) {
		return lit[1 : len(lit)-1]
	}
	return string(appendUnquoted(nil, lit, true))
}

func kindOf(s string) Kind { return JSON{text: s}.Kind() }

const maxSafeInt = 1<<53 - 1

// isSimpleString reports whether a quoted string literal has no escapes, so
// its content is the bytes between the quotes.
func isSimpleString[T ~string | ~[]byte](lit T) bool {
	for i := 1; i < len(lit)-1; i++ {
		if lit[i] == '\\' {
			return false
		}
	}
	return true
}

// unquote returns the content of a validated string literal as UTF-8, lone
// surrogates replaced by U+FFFD.
func unquote(lit string) string {
	if isSimpleString(lit) {
		return lit[1 : len(lit)-1]
	}
	return string(appendUnquoted(make([]byte, 0, len(lit)), lit, false))
}

// appendUnquoted appends the content of a validated string literal (quotes
// included in lit) to dst. A surrogate pair written as two escapes becomes
// one code point. A lone surrogate becomes U+FFFD, or, when wtf8 is set, its
// three-byte generalised UTF-8 encoding, which keeps distinct lone
// surrogates distinct (the form used to compare keys and strings).
func appendUnquoted[T ~string | ~[]byte](dst []byte, lit T, wtf8 bool) []byte {
	s := lit[1 : len(lit)-1]
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		switch e := s[i+1]; e {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(s[i+2 : i+6])
			i += 6
			if utf16.IsSurrogate(r) {
				if r < 0xdc00 && i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
					if lo := hex4(s[i+2 : i+6]); lo >= 0xdc00 && lo < 0xe000 {
						dst = utf8.AppendRune(dst, utf16.DecodeRune(r, lo))
						i += 6
						continue
					}
				}
				if wtf8 {
					dst = append(dst, 0xe0|byte(r>>12), 0x80|byte(r>>6)&0x3f, 0x80|byte(r)&0x3f)
				} else {
					dst = utf8.AppendRune(dst, utf8.RuneError)
				}
				continue
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // '"', '\\', '/'
			dst = append(dst, e)
		}
		i += 2
	}
	return dst
}

// hex4 decodes four validated hex digits.
func hex4[T ~string | ~[]byte](h T) rune {
	var r rune
	for i := range 4 {
		c := h[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// skipValue returns the index just past the JSON value starting at s[i].
// s must be compact, valid JSON (validated at construction).
func skipValue(s string, i int) int {
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		depth := 0
		for ; i < len(s); i++ {
			switch s[i] {
			case '"':
				i = skipString(s, i) - 1
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

// skipString returns the index just past the validated string literal
// starting at s[i].
//
// Every accessor skips over the values it passes (Field walks an object
// member by member), so a long string — a message's text — is skipped many
// times for each time it is parsed. The closing quote is found with
// strings.IndexByte, which reads a word or a vector at a time, rather than
// byte by byte: a quote ends the string unless the run of backslashes just
// before it is odd. The run cannot reach back past the opening quote, nor
// past an escaped quote already passed.
func skipString(s string, i int) int {
	i++
	for {
		q := i + strings.IndexByte(s[i:], '"')
		b := q
		for s[b-1] == '\\' {
			b--
		}
		if (q-b)%2 == 0 {
			return q + 1
		}
		i = q + 1
	}
}

// Clone returns j with its own copy of its text. A value taken out of a
// larger one (Field, Elements) shares the larger one's memory, so keeping
// it alone keeps all of that; its clone keeps only itself.
func (j JSON) Clone() JSON { return JSON{text: strings.Clone(j.text)} }
