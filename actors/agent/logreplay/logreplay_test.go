package logreplay

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dshgo/dsh/actors/llm/replay"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/fixtures"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const runTimeout = 20 * time.Second

func corpusFile(t *testing.T, rel string) string {
	t.Helper()
	root, err := fixtures.CorpusDir()
	require.NoError(t, err)
	return filepath.Join(root, rel)
}

func replayFile(t *testing.T, path string) Result {
	t.Helper()
	rec, o, err := LoadFixture(path)
	require.NoError(t, err)
	r, err := Run(context.Background(), rec, Options{Override: o, Timeout: runTimeout})
	require.NoError(t, err)
	return r
}

// The core scenarios, each with its replay.override.json, reproduce, and
// so do the corpus scenarios that exercise a second tool step in one turn,
// a tool's additional contexts, and a route's adapter defaults.
func TestReplayConformant(t *testing.T) {
	var files []string
	for _, s := range []string{"text-turn", "multi-turn", "tool-call-turn", "cancel", "error-finish",
		"packed-chunks", "todo-write",
		// a second tool step in the same turn
		"advanced-toolchain", "fs-delete-recreate", "fs-write-overwrite", "hook-cc-posttool-block", "pty-tools",
		"repeat-tool-reminder", "session-query-spill", "subagent-continuable", "subagent-mixed", "subagent-multi",
		// a tool's additional contexts, spliced before step/end
		"hook-codex-posttool-context",
		// a header marking adapter defaults
		"fs-write-overwrite-bounded",
		// plugin contributions at a step boundary, delivered by the step-end
		// hook: a background-job notice inserted after step/end (claimed a
		// step later), a reminder inserted and cancelled by its plugin, and
		// a turn-stopping hook's events and steering (another step)
		"missing-sandbox-runner", "code-mode-workspace-context", "hook-cc-stop-continue"} {
		files = append(files, filepath.Join("acp", s, "session.jsonl"))
	}
	files = append(files, "jsonrpc/persistent-tools/session.jsonl", "headless/snapshots_advanced-toolchain/session.jsonl",
		// a context-overflow compaction inside step 2, then the retried
		// attempt (the agent's own compaction; the summariser stream is
		// served from compaction/summary)
		"headless/snapshots_compaction-recovery/session.jsonl")
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			r := replayFile(t, corpusFile(t, f))
			require.True(t, r.Conformant, "divergence: %v", r.Divergence)
			require.Nil(t, r.Divergence)
			require.NotEmpty(t, r.Replayed)
		})
	}
}

// Corpus scenarios that diverge because of a harness plugin dsh does not
// have. Each asserts its one divergence exactly (the replay is
// deterministic), so that a change (a fix, or a new difference) fails here
// and the table is updated.
func TestReplayKnownDivergences(t *testing.T) {
	for _, c := range []struct {
		file          string
		position      int
		expected, got string // prefixes of Divergence.Expected and Got
	}{
		// The compact plugin replaces the history with its snapshot
		// message after the tool result.
		{"acp/agent-instructions/session.jsonl", 17,
			`user/message {"content":[{"type":"text","text":"Earlier context was compacted`, `tool/result`},
		// The title plugin makes its own model call, which the override
		// serves (its session/title-llm-request is appended where it was
		// recorded, before the step's first chunk); dsh has no title
		// plugin, so the step's call gets the title's output.
		{"acp/session-title-after-turn/session.jsonl", 11,
			`assistant/chunk {"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"TITLE_DONE"}}`,
			`assistant/chunk {"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"Late"}}`},
	} {
		t.Run(c.file, func(t *testing.T) {
			r := replayFile(t, corpusFile(t, c.file))
			require.False(t, r.Conformant)
			require.NotNil(t, r.Divergence)
			require.Equal(t, c.position, r.Divergence.Position, "%v", r.Divergence)
			require.True(t, strings.HasPrefix(r.Divergence.Expected, c.expected), "%v", r.Divergence)
			require.True(t, strings.HasPrefix(r.Divergence.Got, c.got), "%v", r.Divergence)
		})
	}
}

func alteredRun(t *testing.T, rel, old, new string) Result {
	t.Helper()
	data, err := os.ReadFile(corpusFile(t, rel))
	require.NoError(t, err)
	data = substituteFixture(data)
	require.Equal(t, 1, bytes.Count(data, []byte(old)), "the alteration must hit exactly once")
	data = bytes.Replace(data, []byte(old), []byte(new), 1)
	f, err := session.ParseFile(data, "altered.jsonl")
	require.NoError(t, err)
	r, err := Run(context.Background(), f, Options{Timeout: runTimeout})
	require.NoError(t, err)
	return r
}

// A changed text chunk (the block-end that carries the finished block) is
// served as recorded, so dsh's completion anchor, assembled from it, no
// longer matches the recorded one.
func TestReplayAlteredChunkDiverges(t *testing.T) {
	r := alteredRun(t, "acp/text-turn/session.jsonl", `"block":{"type":"text","text":"PONG"}`, `"block":{"type":"text","text":"PANG"}`)
	require.False(t, r.Conformant)
	require.Equal(t, 37, r.Divergence.Position, "%v", r.Divergence)
	require.Contains(t, r.Divergence.Expected, `assistant/message`)
	require.Contains(t, r.Divergence.Expected, `"text":"PONG"`)
	require.Contains(t, r.Divergence.Got, `"text":"PANG"`)
}

// A changed turn-end reason diverges at the turn/end.
func TestReplayAlteredTurnEndDiverges(t *testing.T) {
	r := alteredRun(t, "acp/text-turn/session.jsonl", `"reason":{"kind":"completed"}`, `"reason":{"kind":"max-tokens"}`)
	require.False(t, r.Conformant)
	require.Equal(t, 39, r.Divergence.Position, "%v", r.Divergence)
	require.True(t, strings.HasPrefix(r.Divergence.Expected, `turn/end {"turn":1,"reason":{"kind":"max-tokens"}}`), "%v", r.Divergence)
	require.True(t, strings.HasPrefix(r.Divergence.Got, `turn/end {"turn":1,"reason":{"kind":"completed"}}`), "%v", r.Divergence)
}

// Without its override, cancel's recorded open stream is served and then
// hangs; error-finish without its override has no recorded failure
// (the recorded finish is an error chunk), which still ends the turn in
// error: both still conform, since the recordings carry the same output.
func TestReplayWithoutOverride(t *testing.T) {
	for _, s := range []string{"cancel", "text-turn"} {
		data, err := os.ReadFile(corpusFile(t, filepath.Join("acp", s, "session.jsonl")))
		require.NoError(t, err)
		f, err := session.ParseFile(substituteFixture(data), s)
		require.NoError(t, err)
		r, err := Run(context.Background(), f, Options{Override: replay.Override{}, Timeout: runTimeout})
		require.NoError(t, err)
		require.True(t, r.Conformant, "%s: %v", s, r.Divergence)
	}
}

// Every other corpus log replays to a result (no setup error, no stall);
// the results are logged (see the report for the divergences).
func TestReplayCorpusSweep(t *testing.T) {
	files, err := fixtures.CorpusFiles()
	require.NoError(t, err)
	root, err := fixtures.CorpusDir()
	require.NoError(t, err)
	n := 0
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		rec, o, err := LoadFixture(f)
		require.NoError(t, err, rel)
		r, err := Run(context.Background(), rec, Options{Override: o, Timeout: runTimeout})
		require.NoError(t, err, rel)
		if r.Conformant {
			n++
			t.Logf("%s: conformant", rel)
		} else {
			t.Logf("%s: %v", rel, r.Divergence)
		}
	}
	require.Positive(t, n)
}
