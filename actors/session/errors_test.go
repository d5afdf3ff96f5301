package session

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The read errors name the package and the file once, and say the real
// cause: no path after the cause, no "session: " inside the line.
func TestFileErrorsNameThePathOnceAndTheCause(t *testing.T) {
	header := fileHeaderLine()
	lines := fileSession()
	body := strings.Join(lines, "\n") + "\n"
	cases := []struct {
		name, data, want string
		is               error
	}{
		{"empty", "", "session: s.jsonl: log has no complete header line", ErrNoHeader},
		{"half a header", header[:20], "session: s.jsonl: log has no complete header line", ErrNoHeader},
		{"duplicate key in the header", strings.Replace(header, `"version":0`, `"version":0,"version":0`, 1) + "\n",
			`session: s.jsonl: not a session header: messages: not lossless JSON: duplicate key "version" at offset 30`, ErrNotHeader},
		{"header not an object", "[1]\n", "session: s.jsonl: not a session header: not a JSON object", ErrNotHeader},
		{"header without an id", strings.Replace(header, `"id":"`, `"ix":"`, 1) + "\n",
			`session: s.jsonl: not a session header: unknown header field "ix"`, ErrNotHeader},
		{"future version", strings.Replace(header, `"version":0`, `"version":7`, 1) + "\n",
			"session: s.jsonl: log format version 7 was written by a newer harness — upgrade dsh (this build reads version 0)", nil},
		{"unparsable committed event", header + "\n" + strings.Replace(body, `"seq":3,`, `"seq":"3",`, 1),
			"session: s.jsonl: line 5 (seq 3): unparsable committed event: seq is not a non-negative safe integer", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseFile([]byte(c.data), "s.jsonl")
			require.Error(t, err)
			require.Equal(t, c.want, err.Error())
			if c.is != nil {
				require.ErrorIs(t, err, c.is)
			}
			var fe *FileError
			var ce *CorruptError
			require.True(t, errors.As(err, &fe) || errors.As(err, &ce), "typed: %T", err)
		})
	}
	var ve *FormatVersionError
	_, err := ParseFile([]byte(strings.Replace(header, `"version":0`, `"version":7`, 1)+"\n"), "s.jsonl")
	require.ErrorAs(t, err, &ve)
}

// A CorruptError built from an EventError (as a store builds it when a log
// does not restore) names the seq once.
func TestCorruptErrorOfAnEventErrorNamesTheSeqOnce(t *testing.T) {
	err := &CorruptError{Path: "s.jsonl", Offset: -1, Seq: 4, Err: &EventError{Seq: 4, Type: TypeTurnEnd, Err: errors.New("no open turn")}}
	require.Equal(t, "session: s.jsonl: seq 4: turn/end: no open turn", err.Error())
}

// TestTornTailCauseLeavesOutTheSeq: a torn tail's Cause is what a line
// naming the offset and the seq quotes: the decode error without its
// "session: event seq N: ".
func TestTornTailCauseLeavesOutTheSeq(t *testing.T) {
	header := fileHeaderLine()
	lines := fileSession()
	data := header + "\n" + strings.Join(lines, "\n") + "\n" + `{"type":"user/message","seq":"x"}` + "\n"
	f, err := ParseFile([]byte(data), "s.jsonl")
	require.NoError(t, err)
	require.NotNil(t, f.Torn)
	var de *DecodeError
	require.ErrorAs(t, f.Torn.Err, &de)
	require.Equal(t, "seq is not a non-negative safe integer", f.Torn.Cause().Error())

	f, err = ParseFile([]byte(header+"\n"+lines[0]+"\n"+`{"type":"turn/st`), "s.jsonl")
	require.NoError(t, err)
	require.Same(t, f.Torn.Err, f.Torn.Cause(), "other causes are as they are")
}
