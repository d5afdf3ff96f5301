package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRenderShowsControlsVisibly(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, ünïcödé ✓":  "plain text, ünïcödé ✓",
		"a\tb\nc":                "a\tb\nc",
		"\x1b]0;pwned\x07":       `\x1b]0;pwned\x07`,
		"\x1b[2J":                `\x1b[2J`,
		"secret\rpublic":         `secret\x0dpublic`,
		"del\x7f nul\x00":        `del\x7f nul\x00`,
		"c1 \u009b31m":           `c1 \u009b31m`,
		"rlo \u202egnp.exe":      `rlo \u202egnp.exe`,
		"isolate \u2066x\u2069":  `isolate \u2066x\u2069`,
		"bad \xff\xfe utf8 \xc2": `bad \xff\xfe utf8 \xc2`,
		"sep \u2028 and \u2029":  `sep \u2028 and \u2029`,
	} {
		require.Equal(t, want, visibleText(in), "%q", in)
	}
	require.Equal(t, `a\x0ab`+"\tc", visibleLine("a\nb\tc"))
}

func TestRenderDoesNotCopyCleanText(t *testing.T) {
	s := "nothing to escape here\n"
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = visibleText(s) }))
}
