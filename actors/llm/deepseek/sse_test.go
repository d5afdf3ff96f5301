package deepseek

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

type ev struct{ name, data string }

func readEvents(t *testing.T, r io.Reader) ([]ev, error) {
	t.Helper()
	s := newSSEReader(r)
	var out []ev
	for {
		e, err := s.next()
		if err != nil {
			return out, err
		}
		out = append(out, ev{e.name, string(e.data)})
	}
}

func TestSSEReader(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want []ev
	}{
		{"basic", "data: a\n\ndata: b\n\n", []ev{{"", "a"}, {"", "b"}}},
		{"multi-line data joined with LF", "data: {\"a\":\ndata: 1}\n\n", []ev{{"", "{\"a\":\n1}"}}},
		{"no space after colon", "data:x\n\n", []ev{{"", "x"}}},
		{"only one space stripped", "data:  x\n\n", []ev{{"", " x"}}},
		{"comments skipped", ": keep-alive\n\n: OPENROUTER PROCESSING\ndata: a\n: mid\n\n", []ev{{"", "a"}}},
		{"field without colon", "data\n\n", []ev{{"", ""}}},
		{"event name, id and retry", "event: error\nid: 7\nretry: 10\ndata: x\n\ndata: y\n\n", []ev{{"error", "x"}, {"", "y"}}},
		{"event without data is not dispatched", "event: ping\n\ndata: y\n\n", []ev{{"", "y"}}},
		{"blank lines between events", "\n\n\ndata: a\n\n\n\n", []ev{{"", "a"}}},
		{"CRLF", "data: a\r\n\r\ndata: b\r\n\r\n", []ev{{"", "a"}, {"", "b"}}},
		{"lone CR", "data: a\r\rdata: b\r\r", []ev{{"", "a"}, {"", "b"}}},
		{"mixed", "data: a\r\n\ndata: b\r\rdata: c\n\r\n", []ev{{"", "a"}, {"", "b"}, {"", "c"}}},
		{"unterminated event discarded at EOF", "data: a\n\ndata: {\"cut", []ev{{"", "a"}}},
		{"[DONE] without its blank line still counts", "data: a\n\ndata: [DONE]", []ev{{"", "a"}, {"", "[DONE]"}}},
		{"[DONE] with one LF", "data: [DONE]\n", []ev{{"", "[DONE]"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(tc.in), iotest.OneByteReader(strings.NewReader(tc.in))} {
				got, err := readEvents(t, r)
				require.ErrorIs(t, err, io.EOF)
				require.Equal(t, tc.want, got)
			}
		})
	}
}

func TestSSEReaderLongLines(t *testing.T) {
	long := strings.Repeat("x", 100<<10) // past the 16 KiB buffer
	got, err := readEvents(t, strings.NewReader("data: "+long+"\n\ndata: b\n\n"))
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, []ev{{"", long}, {"", "b"}}, got)

	_, err = readEvents(t, io.MultiReader(strings.NewReader("data: "), strings.NewReader(strings.Repeat("y", maxEventBytes+1))))
	require.ErrorIs(t, err, errEventTooLarge)

	many := strings.Repeat("data: "+strings.Repeat("z", 1<<20)+"\n", 9)
	_, err = readEvents(t, strings.NewReader(many))
	require.ErrorIs(t, err, errEventTooLarge)
}

func TestSSEReaderPassesReadErrors(t *testing.T) {
	boom := errors.New("connection reset")
	got, err := readEvents(t, io.MultiReader(strings.NewReader("data: a\n\ndata: b"), iotest.ErrReader(boom)))
	require.ErrorIs(t, err, boom)
	require.Equal(t, []ev{{"", "a"}}, got)
}
