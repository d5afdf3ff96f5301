package session

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

// codecDecode decodes a test line or fails the test.
func codecDecode(t testing.TB, line string) Event {
	t.Helper()
	e, err := DecodeEvent([]byte(line))
	require.NoError(t, err, line)
	return e
}

const (
	codecUserMsg      = `{"content":[{"type":"text","text":"hi"}],"source":{"kind":"user"},"role":"user","id":"m1"}`
	codecAssistantMsg = `{"role":"assistant","content":[{"type":"text","text":"PONG"}],"source":{"kind":"model","provider":"p","model":"m"},"id":"a1"}`
)

// TestCodecRoundTripsCanonicalLines checks that lines already in the
// canonical key order decode and re-encode byte for byte.
func TestCodecRoundTripsCanonicalLines(t *testing.T) {
	lines := []string{
		`{"type":"turn/start","seq":0,"time":0,"data":{"turn":1}}`,
		`{"type":"step/start","seq":1,"time":-5,"data":{"turn":1,"step":1}}`,
		`{"type":"user/message","seq":2,"time":9007199254740991,"data":` + codecUserMsg + `,"surfaceOp":"append"}`,
		`{"type":"user/message","seq":3,"time":1,"data":` + codecUserMsg + `,"surfaceOp":{"op":"replace","start":0,"end":2},"sourceEventSeqs":[0,2]}`,
		`{"type":"assistant/message","seq":4,"time":1,"data":{"turn":1,"step":1,"message":` + codecAssistantMsg + `},"surfaceOp":"append","sourceEventSeqs":[]}`,
		`{"type":"assistant/chunk","seq":5,"time":1,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"a\"b\n"}}}`,
		`{"type":"session/title","seq":6,"time":1,"data":{"title":"x","messageSeqs":[4]}}`,
		`{"type":"x/never-heard-of","seq":7,"time":1,"data":[1,"two",null],"ignorable":true}`,
		`{"type":"x/never-heard-of","seq":8,"time":1,"data":null}`,
		`{"type":"turn/end","seq":9,"time":1,"data":{"turn":1,"reason":{"kind":"completed"}},"ignorable":true}`,
	}
	for _, line := range lines {
		e := codecDecode(t, line)
		require.Equal(t, line, string(AppendEvent(nil, e)))
		again := codecDecode(t, string(AppendEvent(nil, e)))
		require.True(t, e.Equal(again), line)
	}
}

func TestCodecDecodesEnvelopeFields(t *testing.T) {
	e := codecDecode(t, ` { "sourceEventSeqs" : [3, 1], "surfaceOp":{"end":4,"op":"replace","start":2},
		"data":`+codecUserMsg+`, "time": -12, "seq": 7, "type": "user/message" } `)
	require.Equal(t, TypeUserMessage, e.Type())
	require.EqualValues(t, 7, e.Seq())
	require.EqualValues(t, -12, e.Time())
	require.Equal(t, ReplaceOp(2, 4), e.SurfaceOp())
	src, has := e.SourceEventSeqs()
	require.True(t, has)
	require.Equal(t, []int64{3, 1}, src)
	m, ok := e.Message()
	require.True(t, ok)
	require.EqualValues(t, "m1", m.ID())
	// Re-encoding normalises the key order and whitespace.
	require.Equal(t, `{"type":"user/message","seq":7,"time":-12,"data":`+codecUserMsg+
		`,"surfaceOp":{"op":"replace","start":2,"end":4},"sourceEventSeqs":[3,1]}`, string(AppendEvent(nil, e)))

	empty := codecDecode(t, `{"type":"assistant/message","seq":0,"time":0,"data":{"turn":1,"step":1,"message":`+codecAssistantMsg+`},"sourceEventSeqs":[]}`)
	src, has = empty.SourceEventSeqs()
	require.True(t, has, "an empty list is still present")
	require.Empty(t, src)

	foreign := codecDecode(t, `{"type":"hook/invoked","seq":0,"time":0,"data":{"turn":1}}`)
	require.Nil(t, foreign.Payload())
	unknown := codecDecode(t, `{"type":"no/such-type","seq":0,"time":0,"data":{}}`)
	require.Equal(t, EventType("no/such-type"), unknown.Type())
}

func TestDecodeEventRejects(t *testing.T) {
	const d = `"data":{"turn":1}`
	cases := []struct {
		name, line, want string
		seq              int64
	}{
		{"not JSON", `{"type":`, "not lossless JSON", -1},
		{"not an object", `[1]`, "not a JSON object", -1},
		{"duplicate key", `{"type":"turn/start","type":"x","seq":0,"time":0,` + d + `}`, "duplicate key", -1},
		{"unknown key", `{"type":"turn/start","seq":3,"time":0,` + d + `,"extra":1}`, `unknown envelope key "extra"`, 3},
		{"removed key", `{"type":"turn/start","seq":3,"time":0,` + d + `,"surface":"append"}`, `unknown envelope key "surface"`, 3},
		{"no type", `{"seq":0,"time":0,` + d + `}`, "type is not a string", 0},
		{"empty type", `{"type":"","seq":0,"time":0,` + d + `}`, "type is empty", 0},
		{"numeric type", `{"type":1,"seq":0,"time":0,` + d + `}`, "type is not a string", 0},
		{"no seq", `{"type":"turn/start","time":0,` + d + `}`, "seq is not", -1},
		{"negative seq", `{"type":"turn/start","seq":-1,"time":0,` + d + `}`, "seq is not", -1},
		{"fractional seq", `{"type":"turn/start","seq":1.5,"time":0,` + d + `}`, "seq is not", -1},
		{"unsafe seq", `{"type":"turn/start","seq":9007199254740992,"time":0,` + d + `}`, "seq is not", -1},
		{"string seq", `{"type":"turn/start","seq":"1","time":0,` + d + `}`, "seq is not", -1},
		{"no time", `{"type":"turn/start","seq":4,` + d + `}`, "time is not a safe integer", 4},
		{"unsafe time", `{"type":"turn/start","seq":4,"time":-9007199254740992,` + d + `}`, "time is not a safe integer", 4},
		{"fractional time", `{"type":"turn/start","seq":4,"time":0.5,` + d + `}`, "time is not a safe integer", 4},
		{"no data", `{"type":"turn/start","seq":4,"time":0}`, "data is missing", 4},
		{"legacy type", `{"type":"request/header-delta","seq":2,"time":0,"data":{}}`, "was removed from the format", 2},
		{"legacy mode/set", `{"type":"mode/set","seq":2,"time":0,"data":{}}`, "was removed from the format", 2},
		{"bad surfaceOp", `{"type":"user/message","seq":1,"time":0,"data":` + codecUserMsg + `,"surfaceOp":"prepend"}`, "surfaceOp", 1},
		{"sources not array", `{"type":"turn/start","seq":1,"time":0,` + d + `,"sourceEventSeqs":3}`, "sourceEventSeqs is not an array", 1},
		{"negative source", `{"type":"turn/start","seq":1,"time":0,` + d + `,"sourceEventSeqs":[0,-1]}`, "sourceEventSeqs holds -1", 1},
		{"ignorable false", `{"type":"x/y","seq":1,"time":0,` + d + `,"ignorable":false}`, "ignorable must be true", 1},
		{"ignorable string", `{"type":"x/y","seq":1,"time":0,` + d + `,"ignorable":"true"}`, "ignorable must be true", 1},
		{"bad payload", `{"type":"turn/start","seq":5,"time":0,"data":{"turn":"one"}}`, `turn/start: "turn" is not an integer`, 5},
		{"payload not object", `{"type":"step/end","seq":5,"time":0,"data":[]}`, "step/end: data is not an object", 5},
		{"fallback header", `{"type":"request/header","seq":5,"time":0,"data":{"reason":"fallback","header":{}}}`, "removed", 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeEvent([]byte(c.line))
			require.Error(t, err)
			require.Contains(t, err.Error(), c.want)
			var de *DecodeError
			require.True(t, errors.As(err, &de))
			require.Equal(t, c.seq, de.Seq)
			if c.seq >= 0 {
				require.True(t, strings.HasPrefix(err.Error(), "session: event seq "), err.Error())
			}
		})
	}
}

// FuzzDecodeEvent checks that DecodeEvent never panics and that what it
// accepts re-encodes to a line that decodes to an equal event.
func FuzzDecodeEvent(f *testing.F) {
	for _, s := range []string{
		`{"type":"turn/start","seq":0,"time":0,"data":{"turn":1}}`,
		`{"type":"user/message","seq":3,"time":1,"data":` + codecUserMsg + `,"surfaceOp":{"op":"replace","start":0,"end":2},"sourceEventSeqs":[0,2]}`,
		`{"type":"assistant/chunk","seq":5,"time":1,"data":{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":1,"id":"c","name":"bash","argumentsDelta":"{"}}}`,
		`{"type":"x/y","seq":1e2,"time":-3,"data":{"a":[1.5e300]},"ignorable":true}`,
		`{"type":"turn/end","seq":9,"time":1,"data":{"turn":1,"reason":{"kind":"aborted","reason":{"kind":"hook","reason":"r"}}}}`,
		`{"type":"text-chunks","seq0":1,"time0":1,"data":{}}`,
		`{"type":"tool-call-chunks","seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[-1,2],"id":"c","name":"n","args":["a","","\u00e9"]}}`,
		`{"type":"text-chunks","seq0":0,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[-10,-3],"texts":["x","y","z"]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		// The storage-record decoder too: whatever it accepts packs and
		// unpacks to the same events.
		if evs, err := DecodeRecord(line); err == nil {
			buf := AppendRecords(nil, evs, PackChunks)
			var back []Event
			for _, ln := range bytes.Split(bytes.TrimSuffix(buf, []byte("\n")), []byte("\n")) {
				got, err := DecodeRecord(ln)
				if err != nil {
					t.Fatalf("re-encoded record %q does not decode: %v", ln, err)
				}
				back = append(back, got...)
			}
			if len(back) != len(evs) {
				t.Fatalf("record of %d events came back as %d", len(evs), len(back))
			}
			for i := range evs {
				if !evs[i].Equal(back[i]) {
					t.Fatalf("record member %d differs after a round trip: %s", i, buf)
				}
			}
		}

		e, err := DecodeEvent(line)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error is not a *DecodeError: %v", err)
			}
			return
		}
		out := AppendEvent(nil, e)
		again, err := DecodeEvent(out)
		if err != nil {
			t.Fatalf("re-encoded %q does not decode: %v", out, err)
		}
		if !e.Equal(again) {
			t.Fatalf("re-encoded event differs:\n%s\n%s", line, out)
		}
		if _, err := messages.ParseJSON(out); err != nil {
			t.Fatalf("AppendEvent wrote invalid JSON %q: %v", out, err)
		}
	})
}

const codecBenchLine = `{"type":"assistant/chunk","seq":1234,"time":1785730415298,"data":{"turn":3,"step":2,"chunk":{"type":"text-delta","index":1,"text":" the quick brown fox"}}}`

func BenchmarkDecodeEvent(b *testing.B) {
	line := []byte(codecBenchLine)
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeEvent(line); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendEvent(b *testing.B) {
	e := codecDecode(b, codecBenchLine)
	buf := make([]byte, 0, 256)
	b.SetBytes(int64(len(codecBenchLine)))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendEvent(buf[:0], e)
	}
}
