package messages

import (
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// ObjectBuilder writes a JSON object member by member, in call order, for
// encoders that must not take a reflection detour on the hot path. The zero
// value is an empty builder. It is not safe for concurrent use.
//
// Every method writes a valid member, so Build needs no validation: strings
// are escaped, integers are written exactly, and Raw takes an already
// validated JSON. A zero JSON passed to Raw is skipped (absent member).
// The caller must not add the same key twice: the builder does not check
// (that would cost the hot path a key set), and an object with a duplicate
// key is not lossless JSON (ParseJSON refuses it).
//
// ObjectBuilder is the one exported struct of the package that is not an
// immutable value: it is a scratch buffer its owner fills and then turns
// into an immutable JSON with Build, which copies. It never crosses a
// goroutine or actor boundary.
type ObjectBuilder struct {
	b []byte
}

func (o *ObjectBuilder) key(k string) {
	if len(o.b) == 0 {
		o.b = append(o.b, '{')
	} else {
		o.b = append(o.b, ',')
	}
	o.b = AppendQuoted(o.b, k)
	o.b = append(o.b, ':')
}

// String adds a string member.
func (o *ObjectBuilder) String(k, v string) *ObjectBuilder {
	o.key(k)
	o.b = AppendQuoted(o.b, v)
	return o
}

// Int adds an integer member.
func (o *ObjectBuilder) Int(k string, v int64) *ObjectBuilder {
	o.key(k)
	o.b = strconv.AppendInt(o.b, v, 10)
	return o
}

// Float adds a number member, spelled as JavaScript's JSON.stringify spells
// it (0.7, 1e-7, 1e+21, 123456789012345680000), so dsh writes the bytes the
// reference would. A non-finite value or negative zero is not lossless JSON;
// it is written as 0 so Build never fails, and callers that accept floats
// from outside validate them first (see CallConfig.Validate).
func (o *ObjectBuilder) Float(k string, v float64) *ObjectBuilder {
	o.key(k)
	if math.IsInf(v, 0) || math.IsNaN(v) || (v == 0 && math.Signbit(v)) {
		v = 0
	}
	o.b = appendFloat(o.b, v)
	return o
}

// appendFloat appends a finite v in ECMAScript's Number::toString form, as
// encoding/json does: shortest round-trip digits, plain notation for
// 1e-6 <= |v| < 1e21, otherwise exponent notation without a zero-padded
// exponent. strconv's 'g' alone would write 1e-07 and 1.2345678901234568e+20.
func appendFloat(b []byte, v float64) []byte {
	abs := math.Abs(v)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, v, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// Bool adds a boolean member.
func (o *ObjectBuilder) Bool(k string, v bool) *ObjectBuilder {
	o.key(k)
	o.b = strconv.AppendBool(o.b, v)
	return o
}

// Raw adds a member whose value is an existing JSON value; a zero JSON is
// skipped.
func (o *ObjectBuilder) Raw(k string, v JSON) *ObjectBuilder {
	if v.IsZero() {
		return o
	}
	o.key(k)
	o.b = append(o.b, v.text...)
	return o
}

// Object adds a member whose value is the object inner holds so far, as
// inner.Build would return it, without building it: a nested object
// written without an intermediate allocation. inner is only read and may
// go on being used.
func (o *ObjectBuilder) Object(k string, inner *ObjectBuilder) *ObjectBuilder {
	o.key(k)
	if len(inner.b) == 0 {
		o.b = append(o.b, "{}"...)
		return o
	}
	o.b = append(o.b, inner.b...)
	o.b = append(o.b, '}')
	return o
}

// Len returns the length of the builder's output so far: a point between
// two members, which Truncate can return to. An encoder writing many
// objects that share their first members writes those once, takes Len,
// and truncates back to it after each Build (bytes.Buffer's Len and
// Truncate, for the same reason).
func (o *ObjectBuilder) Len() int { return len(o.b) }

// Truncate drops every member added since Len returned n. n must come from
// Len on this builder since its last Reset, so the output stays a run of
// whole members; Truncate panics when n is past the end.
func (o *ObjectBuilder) Truncate(n int) {
	if n < 0 || n > len(o.b) {
		panic("messages: ObjectBuilder.Truncate out of range")
	}
	o.b = o.b[:n]
}

// Build returns the object. The builder may be reused afterwards only after
// Reset or Truncate.
func (o *ObjectBuilder) Build() JSON {
	if len(o.b) == 0 {
		return JSON{text: "{}"}
	}
	return JSON{text: string(append(o.b, '}'))}
}

// Grow makes room for n more bytes, so that a caller that knows the size
// of what it writes (a chunk event's data, on the streaming hot path)
// allocates the buffer once rather than doubling it member by member.
func (o *ObjectBuilder) Grow(n int) { o.b = slices.Grow(o.b, n) }

// Reset empties the builder, keeping its buffer.
func (o *ObjectBuilder) Reset() { o.b = o.b[:0] }

// ArrayOf builds a JSON array of already validated values.
func ArrayOf(vs ...JSON) JSON {
	b := []byte{'['}
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		if v.IsZero() {
			b = append(b, "null"...)
		} else {
			b = append(b, v.text...)
		}
	}
	return JSON{text: string(append(b, ']'))}
}

// stringArray builds a JSON array of strings.
func stringArray(vs []string) JSON {
	b := []byte{'['}
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendQuoted(b, v)
	}
	return JSON{text: string(append(b, ']'))}
}

const hexDigits = "0123456789abcdef"

// AppendQuoted appends s as a JSON string literal. Like JavaScript's
// JSON.stringify it escapes only what JSON requires (quote, backslash,
// control characters); invalid UTF-8 becomes U+FFFD.
func AppendQuoted(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, "\ufffd"...)
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
