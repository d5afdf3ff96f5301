package main

import (
	"encoding/json"
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

func TestVisibleJSONDecodesToTheSameValue(t *testing.T) {
	in := "title \x1b]0;x\x07 csi \u009b31m rlo \u202e del \x7f ok ✓ \u2028"
	b, err := json.Marshal(map[string]string{"text": in})
	require.NoError(t, err)
	out := visibleJSON(string(b))
	require.Equal(t, `{"text":"title \u001b]0;x\u0007 csi \u009b31m rlo \u202e del \u007f ok ✓ \u2028"}`, out)
	var back map[string]string
	require.NoError(t, json.Unmarshal([]byte(out), &back))
	require.Equal(t, in, back["text"])
	require.Equal(t, `"\ufffd"`, visibleJSON("\"\xff\""))
}

func TestRenderDoesNotCopyCleanText(t *testing.T) {
	s := "nothing to escape here\n"
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = visibleText(s) }))
}
