package messages

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// This file is the validator behind ParseJSON: one pass that checks a JSON
// text is lossless in the harness's sense (scanLossless) and, when it is
// not compact already, the pass that strips its whitespace (appendCompact).

// skipStringBytes is skipString on bytes, for appendCompact.
func skipStringBytes(s []byte, i int) int {
	i++
	for s[i] != '"' {
		if s[i] == '\\' {
			i++
		}
		i++
	}
	return i + 1
}

// appendCompact appends src, already validated by scanLossless, to dst
// without the whitespace between tokens.
func appendCompact(dst, src []byte) []byte {
	for i := 0; i < len(src); {
		switch c := src[i]; c {
		case ' ', '\t', '\n', '\r':
			i++
		case '"':
			end := skipStringBytes(src, i)
			dst = append(dst, src[i:end]...)
			i = end
		default:
			dst = append(dst, c)
			i++
		}
	}
	return dst
}

// scanLossless checks that b is exactly one JSON text (RFC 8259, UTF-8) that
// the harness accepts as lossless (see ParseJSON), and reports whether it is
// already compact (no whitespace between tokens).
//
// It is one iterative pass: containers go on an explicit stack, so depth is
// bounded by memory, not by the goroutine stack. Duplicate keys are found
// per object by a linear search over the object's decoded keys, switching to
// a map once an object has more than dupScanLimit keys (a map per small
// object would cost an allocation each for nothing). The decoded keys of all
// open objects share one buffer, truncated as objects close.
//
// A hand-written scanner rather than json.Compact followed by a second walk:
// the second walk would re-find every token anyway, and json.Compact stops
// at 10,000 levels of nesting where the reference has no limit.
func scanLossless(b []byte) (compact bool, err error) {
	type frame struct {
		object  bool
		keys    int                 // where this object's spans start in spans
		keyBuf  int                 // where this object's keys start in keyBuf
		overset map[string]struct{} // keys, once there are more than dupScanLimit
	}
	type span struct{ start, end int }
	const dupScanLimit = 16
	const (
		wantValue = iota
		wantKey
		afterValue
	)
	var (
		stackArr [16]frame
		spansArr [32]span
		keyArr   [256]byte
		stack    = stackArr[:0]
		spans    = spansArr[:0]
		keyBuf   = keyArr[:0]
	)
	compact = true
	n := len(b)
	i := 0
	// Neither helper is a closure over i: a closure that captures the
	// cursor keeps it in memory for the whole scan rather than in a
	// register, and the scan is all cursor.
	ws := func(i int) int {
		if j := skipSpace(b, i); j != i {
			compact = false
			return j
		}
		return i
	}
	fail := func(at int, what string) error {
		return fmt.Errorf("%w: %s at offset %d", ErrNotJSON, what, at)
	}
	state := wantValue
	for {
		if i < n && b[i] <= ' ' { // compact input never calls ws
			i = ws(i)
		}
		switch state {
		case wantValue:
			if i >= n {
				return false, fail(i, "unexpected end of input")
			}
			switch c := b[i]; {
			case c == '{' || c == '[':
				i++
				i = ws(i)
				if i < n && b[i] == c+2 { // '}' is '{'+2, ']' is '['+2
					i++
					state = afterValue
					continue
				}
				stack = append(stack, frame{object: c == '{', keys: len(spans), keyBuf: len(keyBuf)})
				if c == '{' {
					state = wantKey
				}
				continue
			case c == '"':
				end, err := scanString(b, i)
				if err != nil {
					return false, err
				}
				i = end
			case c == 't' || c == 'f' || c == 'n':
				lit := "null"
				if c == 't' {
					lit = "true"
				} else if c == 'f' {
					lit = "false"
				}
				if n-i < len(lit) || string(b[i:i+len(lit)]) != lit {
					return false, fail(i, "invalid literal")
				}
				i += len(lit)
			case c == '-' || (c >= '0' && c <= '9'):
				end, err := scanNumber(b, i)
				if err != nil {
					return false, err
				}
				i = end
			default:
				return false, fail(i, fmt.Sprintf("invalid character %q", c))
			}
			state = afterValue
		case wantKey:
			if i >= n || b[i] != '"' {
				return false, fail(i, "expected a string key")
			}
			end, err := scanString(b, i)
			if err != nil {
				return false, err
			}
			top := &stack[len(stack)-1]
			start := len(keyBuf)
			if isSimpleString(b[i:end]) {
				keyBuf = append(keyBuf, b[i+1:end-1]...)
			} else {
				keyBuf = appendUnquoted(keyBuf, b[i:end], true)
			}
			key := keyBuf[start:]
			if top.overset != nil {
				if _, dup := top.overset[string(key)]; dup {
					return false, fail(i, fmt.Sprintf("duplicate key %q", string(key)))
				}
				top.overset[string(key)] = struct{}{}
				keyBuf = keyBuf[:start]
			} else {
				for _, sp := range spans[top.keys:] {
					if bytes.Equal(keyBuf[sp.start:sp.end], key) {
						return false, fail(i, fmt.Sprintf("duplicate key %q", string(key)))
					}
				}
				spans = append(spans, span{start, len(keyBuf)})
				if len(spans)-top.keys > dupScanLimit {
					top.overset = make(map[string]struct{}, 2*dupScanLimit)
					for _, sp := range spans[top.keys:] {
						top.overset[string(keyBuf[sp.start:sp.end])] = struct{}{}
					}
					spans, keyBuf = spans[:top.keys], keyBuf[:top.keyBuf]
				}
			}
			i = end
			i = ws(i)
			if i >= n || b[i] != ':' {
				return false, fail(i, "expected ':' after object key")
			}
			i++
			state = wantValue
		case afterValue:
			if len(stack) == 0 {
				if i != n {
					return false, fail(i, "trailing data after the value")
				}
				return compact, nil
			}
			top := stack[len(stack)-1]
			switch {
			case i >= n:
				return false, fail(i, "unexpected end of input")
			case b[i] == ',':
				i++
				state = wantValue
				if top.object {
					state = wantKey
				}
			case top.object && b[i] == '}' || !top.object && b[i] == ']':
				i++
				stack = stack[:len(stack)-1]
				spans, keyBuf = spans[:top.keys], keyBuf[:top.keyBuf]
			default:
				return false, fail(i, fmt.Sprintf("invalid character %q after a value", b[i]))
			}
		}
	}
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString validates the string literal starting at b[i] (the quote) and
// returns the index just past it: escapes must be JSON's, control
// characters escaped, and the bytes valid UTF-8.
func scanString(b []byte, i int) (int, error) {
	start := i
	i++
	for i < len(b) {
		i = plainRun(b, i)
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			return i + 1, nil
		case c == '\\':
			if i+1 >= len(b) {
				return 0, fmt.Errorf("%w: unterminated string at offset %d", ErrNotJSON, start)
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return 0, fmt.Errorf("%w: bad \\u escape at offset %d", ErrNotJSON, i)
				}
				i += 6
			default:
				return 0, fmt.Errorf("%w: bad escape at offset %d", ErrNotJSON, i)
			}
		case c < 0x20:
			return 0, fmt.Errorf("%w: unescaped control character in string at offset %d", ErrNotJSON, i)
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return 0, fmt.Errorf("%w: invalid UTF-8 in string at offset %d", ErrNotJSON, i)
			}
			i += size
		}
	}
	return 0, fmt.Errorf("%w: unterminated string at offset %d", ErrNotJSON, start)
}

// plainRun returns the index of the first byte at or after i that a
// string scan must look at: a quote, a backslash, a control character or
// a byte of a multi-byte sequence; len(b) if there is none. Most of a log
// is text inside strings, and most text is plain ASCII, so the scan tests
// eight bytes at a time (SWAR) and looks at single bytes only around the
// one that stopped it.
//
// In a word x of eight bytes, the high bit of a lane of
//
//	(x - 0x20·L) &^ x    is set where the byte is below 0x20,
//	(y - L) &^ y         where y = x ^ c·L, where the byte is c,
//	x                    where the byte is 0x80 or above,
//
// (L = 0x0101010101010101) — exactly, for the lowest such lane: a borrow
// can only mark lanes above a lane that is itself marked, so "some lane is
// marked" is exact, and the byte loop finds which.
func plainRun(b []byte, i int) int {
	const (
		lanes = 0x0101010101010101
		highs = 0x8080808080808080
	)
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q := x ^ ('"' * lanes)
		s := x ^ ('\\' * lanes)
		if ((x-0x20*lanes)&^x|(q-lanes)&^q|(s-lanes)&^s|x)&highs != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			return i
		}
	}
	return i
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// scanNumber validates the number starting at b[i] against JSON's grammar
// and the harness's rule (finite as a double, not negative zero), and
// returns the index just past it.
func scanNumber(b []byte, i int) (int, error) {
	start := i
	digits := func() bool {
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > d
	}
	neg := b[i] == '-'
	if neg {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return 0, fmt.Errorf("%w: bad number at offset %d", ErrNotJSON, start)
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return 0, fmt.Errorf("%w: bad number at offset %d", ErrNotJSON, start)
		}
	}
	exp := false
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		exp = true
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return 0, fmt.Errorf("%w: bad number at offset %d", ErrNotJSON, start)
		}
	}
	lit := b[start:i]
	// Fast path: without an exponent and with fewer than 300 characters the
	// value is finite (it is below 1e300), and it is zero only if every
	// digit is. Everything else goes through ParseFloat, which is where
	// 1e400 overflows and -1e-400 underflows to -0.
	if !exp && len(lit) < 300 {
		if neg && len(bytes.Trim(lit[1:], "0.")) == 0 {
			return 0, fmt.Errorf("%w: negative zero %s", ErrNotJSON, lit)
		}
		return i, nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("%w: bad number %s", ErrNotJSON, lit)
	}
	if math.IsInf(f, 0) {
		return 0, fmt.Errorf("%w: number %.40s is not finite", ErrNotJSON, lit)
	}
	if f == 0 && math.Signbit(f) {
		return 0, fmt.Errorf("%w: negative zero %.40s", ErrNotJSON, lit)
	}
	return i, nil
}
