package main

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Text from a log or a model (message text, tool arguments and results,
// provider error messages, header fields) is untrusted: written raw to a
// terminal, an escape sequence in it could set the window title, clear the
// screen, rewrite what was printed before (a carriage return, cursor
// moves) or, on some terminals, answer back as if typed. So whatever dsh
// prints of such text for people goes through visibleText or visibleLine,
// which render each control character as a visible escape:
//
//	C0 controls (U+0000..U+001F) and DEL    \xHH, e.g. ESC as \x1b, CR as \x0d
//	a byte that is not valid UTF-8          \xHH
//	C1 controls (U+0080..U+009F)            \uHHHH, e.g. CSI as \u009b
//	bidi controls, line/paragraph separators \uHHHH, e.g. RLO as \u202e
//
// A tab is kept, and a newline too in visibleText (in visibleLine it is
// shown as \x0a). Backslashes are printed as they are: the rendering is for
// reading, not a reversible encoding.
//
// JSON outputs (--json, dsh log messages, /messages) stay JSON: their
// encoders escape C0 controls but leave DEL, C1 and bidi controls raw
// (as the log files themselves must, to match the reference's bytes), so
// visibleJSON escapes those as \u00HH / \uHHHH, which decodes to the same
// value: such runes can only stand inside a JSON string.

// visibleText renders the control characters of s visibly, keeping
// newlines and tabs: for text printed as lines of its own.
func visibleText(s string) string { return render(s, "\n\t") }

// visibleLine renders the control characters of s visibly, newlines
// included, keeping tabs: for text that must stay on one line.
func visibleLine(s string) string { return render(s, "\t") }

// render returns s with every control character not in keep escaped, or
// s itself (no copy) when it has none, which is the common case.
func render(s, keep string) string {
	printable := func(c byte) bool { return c >= 0x20 && c < 0x7f }
	return rewrite(s, printable, func(c byte, r rune, size int) string {
		switch {
		case r == utf8.RuneError && size == 1:
			return hexEscape(`\x`, rune(c), 2)
		case r < 0x20 || r == 0x7f:
			if strings.IndexByte(keep, c) < 0 {
				return hexEscape(`\x`, r, 2)
			}
		case isFormatControl(r):
			return hexEscape(`\u`, r, 4)
		}
		return ""
	})
}

// visibleJSON escapes the DEL, C1 and bidi controls of the encoded JSON
// value s (see above); a byte that is not UTF-8 becomes \ufffd, which is
// what a decoder would make of it anyway.
func visibleJSON(s string) string {
	plain := func(c byte) bool { return c < utf8.RuneSelf && c != 0x7f }
	return rewrite(s, plain, func(_ byte, r rune, size int) string {
		switch {
		case r == utf8.RuneError && size == 1:
			return `\ufffd`
		case r == 0x7f || isFormatControl(r):
			return hexEscape(`\u`, r, 4)
		}
		return ""
	})
}

// rewrite returns s with each rune replaced by what escape makes of it
// ("" keeps the rune), or s itself (no copy) when escape keeps them all.
// escape is given the rune's first byte, the rune (utf8.RuneError with
// size 1 for a byte that is not UTF-8) and its size; it is never asked
// about a byte plain accepts, which is the fast path.
func rewrite(s string, plain func(c byte) bool, escape func(c byte, r rune, size int) string) string {
	var b strings.Builder
	done := 0 // s[:done] is in b (or clean, while b is empty)
	for i := 0; i < len(s); {
		c := s[i]
		if plain(c) {
			i++
			continue
		}
		r, size := rune(c), 1
		if c >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(s[i:])
		}
		if esc := escape(c, r, size); esc != "" {
			b.WriteString(s[done:i])
			b.WriteString(esc)
			done = i + size
		}
		i += size
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// isFormatControl reports the non-ASCII runes that steer a terminal or the
// text's layout rather than print: C1 controls, bidi embeddings, overrides,
// isolates and marks, and the Unicode line and paragraph separators.
func isFormatControl(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f:
		return true
	case r >= 0x2028 && r <= 0x202e:
		return true
	case r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

func hexEscape(prefix string, r rune, width int) string {
	h := strconv.FormatInt(int64(r), 16)
	return prefix + strings.Repeat("0", width-len(h)) + h
}
