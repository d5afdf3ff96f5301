package logreplay

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// recordingFrom writes a recording built from corpus log rel: its lines up
// to and including the first one containing through, then more (each a
// whole line). override, when not empty, is written beside it as
// replay.override.json.
func recordingFrom(t *testing.T, rel, through string, override string, more ...string) string {
	t.Helper()
	raw, err := os.ReadFile(corpusFile(t, rel))
	require.NoError(t, err)
	var kept []string
	found := false
	for _, ln := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n") {
		kept = append(kept, ln)
		if strings.Contains(ln, through) {
			found = true
			break
		}
	}
	require.True(t, found, "no line with %s", through)
	dir := t.TempDir()
	path := filepath.Join(dir, "session.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(append(kept, more...), "\n")+"\n"), 0o600))
	if override != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "replay.override.json"), []byte(override), 0o600))
	}
	return path
}

const abortedUser = `"reason":{"kind":"aborted","reason":{"kind":"user"}}`

// TestReplayCancelledPhases: a user cancellation recorded in each phase of
// a turn replays conformant, the driver cancelling where the recording
// shows it (docs/replay.md). Each recording is a corpus log cut where the
// cancellation lands, ending as the reference's loop ends a turn
// cancelled there: while streaming (the corpus' own cancel scenario);
// while a tool runs (its result is the ABORTED one, then step/end and
// turn/end); in the pre-step after a tool step (turn/end, no further
// step); during a retry's backoff (llm/retry without llm/retry-started);
// during a compaction's summariser call (compaction/end with an error and
// no summary, then step/end and turn/end);
// and in the first pre-step of a turn, after the claim (turn/end, no
// step, the claimed message not recorded).
func TestReplayCancelledPhases(t *testing.T) {
	const toolTurn = "acp/tool-call-turn/session.jsonl"
	cases := map[string]string{
		"streaming": corpusFile(t, "acp/cancel/session.jsonl"),
		"tool execution": recordingFrom(t, toolTurn, `"type":"tool/call","seq":64,`, "",
			`{"type":"tool/result","seq":65,"time":1,"data":{"turn":1,"step":1,"message":{"source":{"kind":"tool","callId":"call_00_Rn2Mz1y8uZN62ukEXiNO2077"},"content":[{"type":"tool-result","toolCallId":"call_00_Rn2Mz1y8uZN62ukEXiNO2077","content":[{"type":"text","text":"Error: tool call aborted"}],"isError":true}],"role":"user","id":"r-aborted"},"error":{"name":"AbortError","code":"ABORTED"}},"sourceEventSeqs":[64],"surfaceOp":"append"}`,
			`{"type":"step/end","seq":66,"time":1,"data":{"turn":1,"step":1}}`,
			`{"type":"turn/end","seq":67,"time":1,"data":{"turn":1,`+abortedUser+`}}`),
		"pre-step after a tool step": recordingFrom(t, toolTurn, `"type":"step/end","seq":66,`, "",
			`{"type":"turn/end","seq":67,"time":1,"data":{"turn":1,`+abortedUser+`}}`),
		"retry backoff": recordingFrom(t, "acp/error-finish/session.jsonl", `"type":"assistant/chunk","seq":9,`,
			`[{ "kind": "throw", "chunks": [], "message": "simulated provider error (HTTP 401)", "code": "AUTH" }]`,
			`{"type":"llm/retry","seq":10,"time":1,"data":{"retryId":"r1","turn":1,"step":1,"provider":"deepseek-official","mode":"normal","policyKey":"default","retry":1,"maxRetries":3,"delayMs":1000,"failure":{"message":"simulated provider error (HTTP 401)","code":"AUTH"}}}`,
			`{"type":"step/end","seq":11,"time":1,"data":{"turn":1,"step":1}}`,
			`{"type":"turn/end","seq":12,"time":1,"data":{"turn":1,`+abortedUser+`}}`),
		"compaction": recordingFrom(t, "headless/snapshots_compaction-recovery/session.jsonl", `"type":"compaction/start","seq":19,`, "",
			`{"type":"compaction/end","seq":20,"time":1,"data":{"compactionId":"338e88fa-e78b-4d49-bd38-8f919e85f5e1","turn":1,"error":"compaction aborted"}}`,
			`{"type":"step/end","seq":21,"time":1,"data":{"turn":1,"step":2}}`,
			`{"type":"turn/end","seq":22,"time":1,"data":{"turn":1,`+abortedUser+`}}`),
		"first pre-step": recordingFrom(t, toolTurn, `"type":"agent/inbox/spliced","seq":2,`, "",
			`{"type":"turn/end","seq":3,"time":1,"data":{"turn":1,`+abortedUser+`}}`),
	}
	for name, path := range cases {
		t.Run(name, func(t *testing.T) {
			r := replayFile(t, path)
			require.True(t, r.Conformant, "divergence: %v", r.Divergence)
		})
	}
}
