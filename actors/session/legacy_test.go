package session

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

const legacyHeader = `{"type":"session","version":0,"id":"s-old","createdAt":0,"delegationDepth":0}`

// The current events a legacy case needs around it.
const (
	lTurn1   = `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}`
	lStep1   = `{"type":"step/start","seq":1,"time":1,"data":{"turn":1,"step":1}}`
	lUser    = `{"type":"user/message","seq":2,"time":1,"data":{"id":"u1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}`
	lAsst    = `{"type":"assistant/message","seq":3,"time":1,"data":{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","content":[{"type":"tool-call","id":"c1","name":"read","arguments":"{}"}],"source":{"kind":"model","provider":"p","model":"m"}}},"surfaceOp":"append","sourceEventSeqs":[]}`
	lCall    = `{"type":"tool/call","seq":4,"time":1,"data":{"turn":1,"step":1,"callId":"c1","name":"read","arguments":"{}"}}`
	lStepEnd = `{"type":"step/end","seq":%d,"time":1,"data":{"turn":1,"step":1}}`
)

func legacyFile(lines ...string) string {
	return legacyHeader + "\n" + strings.Join(lines, "\n") + "\n"
}

// TestLegacyShapesMigrate: one log per older shape the reference upgrades
// on load; each loads, as a log, with the older event replaced by exactly
// the current event given (the other events untouched), and the file
// counts one upgrade.
func TestLegacyShapesMigrate(t *testing.T) {
	cases := []struct {
		name   string
		before []string // current events before the legacy one (seqs 0..)
		legacy string
		want   string // the current event it becomes
		after  []string
	}{
		{
			name:   "turn/start with trigger",
			legacy: `{"type":"turn/start","seq":0,"time":5,"data":{"turn":1,"trigger":{"kind":"message"}}}`,
			want:   `{"type":"turn/start","seq":0,"time":5,"data":{"turn":1}}`,
		},
		{
			name:   "turn/end aborted without a cause",
			before: []string{lTurn1},
			legacy: `{"type":"turn/end","seq":1,"time":5,"data":{"turn":1,"reason":{"kind":"aborted"}}}`,
			want:   `{"type":"turn/end","seq":1,"time":5,"data":{"turn":1,"reason":{"kind":"aborted","reason":{"kind":"legacy"}}}}`,
		},
		{
			name:   "turn/end disposed",
			before: []string{lTurn1},
			legacy: `{"type":"turn/end","seq":1,"time":5,"data":{"turn":1,"reason":{"kind":"disposed"}}}`,
			want:   `{"type":"turn/end","seq":1,"time":5,"data":{"turn":1,"reason":{"kind":"aborted","reason":{"kind":"disposed"}}}}`,
		},
		{
			name:   "turn/end error {step, failure}",
			before: []string{lTurn1},
			legacy: `{"type":"turn/end","seq":1,"time":5,"data":{"turn":1,"reason":{"kind":"error","step":1,"failure":{"message":"boom","code":"PROVIDER_ERROR"}}}}`,
			want:   `{"type":"turn/end","seq":1,"time":5,"data":{"turn":1,"reason":{"kind":"error","error":{"message":"boom","code":"PROVIDER_ERROR"}}}}`,
		},
		{
			name:   "turn/end error {step, message, code}",
			before: []string{lTurn1},
			legacy: `{"type":"turn/end","seq":1,"time":5,"data":{"turn":1,"reason":{"kind":"error","step":1,"message":"boom","code":"RATE_LIMIT"}}}`,
			want:   `{"type":"turn/end","seq":1,"time":5,"data":{"turn":1,"reason":{"kind":"error","error":{"message":"boom","code":"RATE_LIMIT"}}}}`,
		},
		{
			name:   "turn/end error {step, message} without code",
			before: []string{lTurn1},
			legacy: `{"type":"turn/end","seq":1,"time":5,"data":{"turn":1,"reason":{"kind":"error","step":1,"message":"boom"}}}`,
			want:   `{"type":"turn/end","seq":1,"time":5,"data":{"turn":1,"reason":{"kind":"error","error":{"message":"boom","code":"UNKNOWN"}}}}`,
		},
		{
			name:   "steering/message {turn, message}",
			before: []string{lTurn1, lStep1},
			legacy: `{"type":"steering/message","seq":2,"time":5,"data":{"turn":1,"message":{"id":"m9","role":"user","content":[{"type":"text","text":"steer"}],"source":{"kind":"user"}}},"surfaceOp":"append"}`,
			want:   `{"type":"user/message","seq":2,"time":5,"data":{"id":"m9","role":"user","content":[{"type":"text","text":"steer"}],"source":{"kind":"user"}},"surfaceOp":"append"}`,
		},
		{
			name:   "steering/message {turn, content, source}",
			before: []string{lTurn1, lStep1},
			legacy: `{"type":"steering/message","seq":2,"time":5,"data":{"turn":1,"content":[{"type":"text","text":"steer"}],"source":{"kind":"user"}}}`,
			want:   `{"type":"user/message","seq":2,"time":5,"data":{"id":"legacy-message:s-old:2","role":"user","content":[{"type":"text","text":"steer"}],"source":{"kind":"user"}},"surfaceOp":"append"}`,
		},
		{
			name:   "user/message without id or role",
			before: []string{lTurn1, lStep1},
			legacy: `{"type":"user/message","seq":2,"time":5,"data":{"content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}`,
			want:   `{"type":"user/message","seq":2,"time":5,"data":{"id":"legacy-message:s-old:2","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}`,
		},
		{
			name:   "user/message without role",
			before: []string{lTurn1, lStep1},
			legacy: `{"type":"user/message","seq":2,"time":5,"data":{"id":"u7","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}`,
			want:   `{"type":"user/message","seq":2,"time":5,"data":{"id":"u7","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}`,
		},
		{
			name:   "assistant/message {content, provenance}",
			before: []string{lTurn1, lStep1, lUser},
			legacy: `{"type":"assistant/message","seq":3,"time":5,"data":{"turn":1,"step":1,"content":[{"type":"text","text":"hello"}],"provenance":{"provider":"p","model":"m"},"usage":{"inputTokens":1,"outputTokens":2}},"surfaceOp":"append","sourceEventSeqs":[]}`,
			want:   `{"type":"assistant/message","seq":3,"time":5,"data":{"turn":1,"step":1,"usage":{"inputTokens":1,"outputTokens":2},"message":{"id":"legacy-message:s-old:3","role":"assistant","content":[{"type":"text","text":"hello"}],"source":{"provider":"p","model":"m","kind":"model"}}},"surfaceOp":"append","sourceEventSeqs":[]}`,
		},
		{
			name:   "tool/result {callId, content, isError}",
			before: []string{lTurn1, lStep1, lUser, lAsst, lCall},
			legacy: `{"type":"tool/result","seq":5,"time":5,"data":{"turn":1,"step":1,"callId":"c1","content":[{"type":"text","text":"ok"}],"isError":false},"surfaceOp":"append","sourceEventSeqs":[4]}`,
			want:   `{"type":"tool/result","seq":5,"time":5,"data":{"turn":1,"step":1,"message":{"id":"legacy-message:s-old:5","role":"user","content":[{"type":"tool-result","toolCallId":"c1","content":[{"type":"text","text":"ok"}],"isError":false}],"source":{"kind":"tool","callId":"c1"}}},"surfaceOp":"append","sourceEventSeqs":[4]}`,
			after:  []string{strings.Replace(lStepEnd, "%d", "6", 1)},
		},
		{
			name: "replacing tool/result inherits its start node's id",
			before: []string{lTurn1, lStep1, lUser, lAsst, lCall,
				`{"type":"tool/result","seq":5,"time":1,"data":{"turn":1,"step":1,"message":{"id":"r1","role":"user","content":[{"type":"tool-result","toolCallId":"c1","content":[{"type":"text","text":"a long output"}],"isError":false}],"source":{"kind":"tool","callId":"c1"}}},"surfaceOp":"append","sourceEventSeqs":[4]}`,
				strings.Replace(lStepEnd, "%d", "6", 1),
				`{"type":"compaction/prune","seq":7,"time":1,"data":{"shadowedRange":{"start":5,"end":5},"shadowedSeqs":[5],"shadowedTokenCount":3}}`},
			legacy: `{"type":"tool/result","seq":8,"time":5,"data":{"turn":1,"step":1,"callId":"c1","content":[{"type":"text","text":"[pruned]"}],"isError":false},"surfaceOp":{"op":"replace","start":5,"end":5},"sourceEventSeqs":[5,7]}`,
			want:   `{"type":"tool/result","seq":8,"time":5,"data":{"turn":1,"step":1,"message":{"id":"r1","role":"user","content":[{"type":"tool-result","toolCallId":"c1","content":[{"type":"text","text":"[pruned]"}],"isError":false}],"source":{"kind":"tool","callId":"c1"}}},"surfaceOp":{"op":"replace","start":5,"end":5},"sourceEventSeqs":[5,7]}`,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lines := append(append(append([]string{}, c.before...), c.legacy), c.after...)
			f, err := ParseFile([]byte(legacyFile(lines...)), "session.jsonl")
			require.NoError(t, err)
			require.Nil(t, f.Torn)
			require.Equal(t, 1, f.Upgraded)
			require.Len(t, f.Events, len(lines))
			want, err := DecodeEvent([]byte(c.want))
			require.NoError(t, err, "the expected event is current")
			got := f.Events[len(c.before)]
			require.JSONEq(t, string(AppendEvent(nil, want)), string(AppendEvent(nil, got)))
			for i, ln := range c.before {
				e, err := DecodeEvent([]byte(ln))
				require.NoError(t, err)
				require.True(t, e.Equal(f.Events[i]), "event %d untouched", i)
			}
			_, err = f.Log()
			require.NoError(t, err, "the upgraded events form a valid log")
		})
	}
}

// TestLegacyShapesRefused: the shapes the reference refuses on load are
// refused with an error naming the problem; a current-looking but
// malformed event is corruption, not legacy. A turn/end follows each, so
// the bad line is committed: the file is corrupt, not torn.
func TestLegacyShapesRefused(t *testing.T) {
	end := `{"type":"turn/end","seq":%d,"time":1,"data":{"turn":1,"reason":{"kind":"completed"}}}`
	cases := []struct {
		name   string
		before []string
		line   string
		want   string
	}{
		{"request/header-delta", []string{lTurn1}, `{"type":"request/header-delta","seq":1,"time":1,"data":{"delta":{}}}`, "removed from the format"},
		{"mode/set", []string{lTurn1}, `{"type":"mode/set","seq":1,"time":1,"data":{"mode":"plan"}}`, "removed from the format"},
		{"fallback header reason", []string{lTurn1}, `{"type":"request/header","seq":1,"time":1,"data":{"header":{"config":{"provider":"p","model":"m"}},"reason":"fallback"}}`, "fallback"},
		{"turn/start trigger with another key", nil, `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1,"trigger":{"kind":"message"},"x":1}}`, "exactly turn and trigger"},
		{"turn/start trigger without turn", nil, `{"type":"turn/start","seq":0,"time":1,"data":{"trigger":{"kind":"message"},"x":1}}`, "exactly turn and trigger"},
		{"turn/start trigger not an object", nil, `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1,"trigger":"message"}}`, "trigger"},
		{"current turn/end, bad cause", []string{lTurn1}, `{"type":"turn/end","seq":1,"time":1,"data":{"turn":1,"reason":{"kind":"aborted","reason":{"kind":"nobody"}}}}`, "unknown"},
		{"current turn/end error, bad failure", []string{lTurn1}, `{"type":"turn/end","seq":1,"time":1,"data":{"turn":1,"reason":{"kind":"error","error":5}}}`, "turn/end error"},
		{"legacy error with a bad failure", []string{lTurn1}, `{"type":"turn/end","seq":1,"time":1,"data":{"turn":1,"reason":{"kind":"error","step":1,"failure":5}}}`, "does not migrate"},
		{"steering/message with extra keys", []string{lTurn1, lStep1}, `{"type":"steering/message","seq":2,"time":1,"data":{"turn":1,"message":{"id":"m","role":"user","content":[],"source":{"kind":"user"}},"x":1}}`, "exactly turn and message"},
		{"user/message with a foreign role", []string{lTurn1, lStep1}, `{"type":"user/message","seq":2,"time":1,"data":{"role":"assistant","content":[],"source":{"kind":"user"}},"surfaceOp":"append"}`, "role"},
		{"current user/message, bad content", []string{lTurn1, lStep1}, `{"type":"user/message","seq":2,"time":1,"data":{"id":"u","role":"user","content":"hi","source":{"kind":"user"}},"surfaceOp":"append"}`, "content"},
		{"current assistant/message, bad message", []string{lTurn1, lStep1, lUser}, `{"type":"assistant/message","seq":3,"time":1,"data":{"turn":1,"step":1,"message":{"role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}},"surfaceOp":"append"}`, "id"},
		{"legacy assistant/message without provenance", []string{lTurn1, lStep1, lUser}, `{"type":"assistant/message","seq":3,"time":1,"data":{"turn":1,"step":1,"content":[]},"surfaceOp":"append"}`, "provenance"},
		{"legacy tool/result replacing a missing node", []string{lTurn1, lStep1, lUser, lAsst, lCall}, `{"type":"tool/result","seq":5,"time":1,"data":{"turn":1,"step":1,"callId":"c1","content":[]},"surfaceOp":{"op":"replace","start":99,"end":99}}`, "replaces seq 99"},
		{"legacy tool/result, isError not a boolean", []string{lTurn1, lStep1, lUser, lAsst, lCall}, `{"type":"tool/result","seq":5,"time":1,"data":{"turn":1,"step":1,"callId":"c1","content":[],"isError":"no"},"surfaceOp":"append"}`, "isError"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lines := append(append([]string{}, c.before...), c.line,
				strings.Replace(end, "%d", itoa(int64(len(c.before)+1)), 1))
			_, err := ParseFile([]byte(legacyFile(lines...)), "session.jsonl")
			var ce *CorruptError
			require.ErrorAs(t, err, &ce)
			require.ErrorContains(t, err, c.want)
		})
	}
	for _, field := range []string{`"sandboxMode":"workspace-write"`, `"approvalPolicy":"never"`} {
		hdr := strings.Replace(legacyHeader, `"delegationDepth":0`, `"delegationDepth":0,`+field, 1)
		_, err := ParseFile([]byte(hdr+"\n"+lTurn1+"\n"), "session.jsonl")
		require.ErrorContains(t, err, "unknown header field", field)
	}
}

// TestLegacyNotOnAppend: the older shapes migrate only when a stored log is
// read; appending or decoding one alone is still refused.
func TestLegacyNotOnAppend(t *testing.T) {
	_, err := DecodeEvent([]byte(`{"type":"turn/start","seq":0,"time":5,"data":{"turn":1,"trigger":{"kind":"message"}}}`))
	require.Error(t, err)
	l := newTestLog(t)
	_, err = l.Append(NewDraft("steering/message", messages.MustParseJSON(`{"turn":1,"content":[],"source":{"kind":"user"}}`)), 1)
	require.Error(t, err)
}

// FuzzLegacyMigrate: whatever the record, migration either says it is not
// an older shape, refuses it, or yields an envelope that is no longer an
// older shape; it never panics. A migrated record that decodes decodes to
// the type it was migrated to.
func FuzzLegacyMigrate(f *testing.F) {
	// Run briefly: go test -run '^$' -fuzz FuzzLegacyMigrate -fuzztime 30s -fuzzminimizetime=10x ./actors/session/
	for _, s := range []string{
		`{"type":"turn/start","seq":0,"time":5,"data":{"turn":1,"trigger":{"kind":"message"}}}`,
		`{"type":"turn/end","seq":1,"time":5,"data":{"turn":1,"reason":{"kind":"error","step":1,"message":"boom"}}}`,
		`{"type":"turn/end","seq":1,"time":5,"data":{"turn":1,"reason":{"kind":"disposed"}}}`,
		`{"type":"steering/message","seq":2,"time":5,"data":{"turn":1,"content":[{"type":"text","text":"steer"}],"source":{"kind":"user"}}}`,
		`{"type":"user/message","seq":2,"time":5,"data":{"content":[],"source":{"kind":"user"}},"surfaceOp":"append"}`,
		`{"type":"assistant/message","seq":3,"time":5,"data":{"turn":1,"step":1,"content":[],"provenance":{"provider":"p","model":"m"}},"surfaceOp":"append"}`,
		`{"type":"tool/result","seq":8,"time":5,"data":{"turn":1,"step":1,"callId":"c1","content":[]},"surfaceOp":{"op":"replace","start":0,"end":0}}`,
		`{"type":"tool/result","seq":5,"time":5,"data":{"callId":"c1","content":[],"isError":true}}`,
	} {
		f.Add(s)
	}
	prior, err := DecodeEvent([]byte(`{"type":"user/message","seq":0,"time":1,"data":{"id":"u1","role":"user","content":[],"source":{"kind":"user"}},"surfaceOp":"append"}`))
	require.NoError(f, err)
	at := func(seq int64) (Event, bool) { return prior, seq == 0 }
	f.Fuzz(func(t *testing.T, line string) {
		j, err := messages.ParseJSON([]byte(line))
		if err != nil {
			return
		}
		m, err := migrateLegacy(j, "s-fuzz", at)
		if err != nil {
			return
		}
		again, err := migrateLegacy(m, "s-fuzz", at)
		if err == nil {
			t.Fatalf("a migrated record is an older shape again: %s -> %s -> %s", line, m, again)
		}
		e, err := decodeEventJSON(m)
		if err != nil {
			return
		}
		if tj, _ := m.Field("type"); `"`+string(e.Type())+`"` != tj.String() {
			t.Fatalf("decoded type %s, migrated %s", e.Type(), tj)
		}
	})
}
