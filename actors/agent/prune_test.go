package agent

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// prunableLog is a closed turn whose shadowed span holds a small and an
// oversized tool result, followed by a short retained tail.
func prunableLog(t *testing.T) (l *session.Log, small, big int64, bigText string) {
	b := newLogBuilder(t)
	b.begin()
	b.user(longPremise)
	_, small = b.pair("c0", `{"n":0}`, "tiny")
	bigText = strings.Repeat("0123456789", 800)
	_, big = b.pair("c1", `{"n":1}`, bigText)
	b.assistant(messages.TextBlock("done"))
	b.end()
	return b.l, small, big, bigText
}

// The pruner (docs/agent-loop.md#compaction): before the summariser call of a
// context-overflow compaction, the oversized tool result of the shadowed span
// is replaced, content only, by a placeholder: compaction/prune then the
// tool/result replace of that single node; the summariser sees the pruned
// content and the checkpoint shadows the replacement.
func TestCompactionPrunesOversizedToolResults(t *testing.T) {
	l, small, big, bigText := prunableLog(t)
	mock := newMock(overflowFinish(), textResponse("SUM"), textResponse("after"))
	h := newHarness(t, mock, l, withCompaction(CompactionConfig{NewID: fixedIDs("cmp-p"), PruneToolResultBytes: 1000}))
	h.followup("next")
	h.waitIdle()
	es := h.events()
	before := int(ofType(es, session.TypeCompactionStart)[0].Seq())
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}, {Kind: session.EndCompleted}}, turnEnds(es))
	require.NoError(t, session.CheckTrace(es))
	_, err := session.Restore(testHeader(), es)
	require.NoError(t, err, "the session accepts the content-only replace on restore")
	added := es[before : before+6]
	require.Equal(t, []session.EventType{session.TypeCompactionStart, session.TypeCompactionPrune,
		session.TypeToolResult, session.TypeCompactionSum, session.TypeUserMessage, session.TypeCompactionEnd},
		types(added))

	prune, repl := added[1], added[2]
	old, _ := es[big].Payload().(session.ToolResult)
	require.JSONEq(t, fmt.Sprintf(`{"shadowedRange":{"start":%d,"end":%d},"shadowedSeqs":[%d],"shadowedTokenCount":%d}`,
		big, big, big, estimateMessageTokens(old.Message)), prune.Data().String())
	op := repl.SurfaceOp()
	require.Equal(t, session.OpReplace, op.Kind())
	start, end := op.Range()
	require.Equal(t, [2]int64{big, big}, [2]int64{start, end})
	src, _ := repl.SourceEventSeqs()
	require.Equal(t, []int64{big}, src)
	nm := repl.Payload().(session.ToolResult).Message
	require.Equal(t, old.Message.ID(), nm.ID(), "the replace keeps the message id")
	want := fmt.Sprintf(prunedToolResultText, len(bigText))
	nested := ""
	for c := range nm.Block(0).NestedBlocks() {
		nested += c.Text()
	}
	require.Equal(t, want, nested)

	// The summariser saw the pruned result, and the small one as it was.
	req := mock.Requests()[1]
	require.Equal(t, purposeCompaction, req.Purpose())
	var seen []string
	for _, m := range req.Messages() {
		if b := m.Block(0); b.Type() == messages.BlockToolResult {
			for c := range b.NestedBlocks() {
				seen = append(seen, c.Text())
			}
		}
	}
	require.Equal(t, []string{"tiny", want}, seen)

	// The checkpoint shadows the replacement, not the pruned original.
	cp := added[4]
	cpSrc, _ := cp.SourceEventSeqs()
	require.Contains(t, cpSrc, repl.Seq())
	require.Contains(t, cpSrc, small)
	require.NotContains(t, cpSrc, big)
	sum := added[3]
	require.Contains(t, field(t, sum, "shadowedSeqs"), fmt.Sprint(repl.Seq()))

	// The retried request runs on the checkpoint.
	retried := mock.Requests()[2]
	require.Equal(t, compactionPlugin, retried.Message(0).Source().Plugin())
}

// Off by default; and a manual compaction between turns never prunes (a
// tool/result replace belongs inside a turn).
func TestCompactionPrunerIsOffByDefaultAndNotBetweenTurns(t *testing.T) {
	l, _, _, _ := prunableLog(t)
	h := newHarness(t, newMock(overflowFinish(), textResponse("SUM"), textResponse("after")), l,
		withCompaction(CompactionConfig{NewID: fixedIDs("cmp-q")}))
	h.followup("next")
	h.waitIdle()
	es := h.events()
	require.Len(t, ofType(es, session.TypeCompactionEnd), 1)
	require.Empty(t, ofType(es, session.TypeCompactionPrune))
	require.NoError(t, session.CheckTrace(es))

	l, _, _, _ = prunableLog(t)
	h = newHarness(t, newMock(textResponse("SUM")), l,
		withCompaction(CompactionConfig{NewID: fixedIDs("cmp-m"), PruneToolResultBytes: 1000}))
	h.refs++
	require.Equal(t, CompactDone, h.ask(Compact{Ref: h.refs}).(Compacted).Outcome)
	es = h.events()
	require.Empty(t, ofType(es, session.TypeCompactionPrune))
	require.NoError(t, session.CheckTrace(es))
}

// A compaction whose summary fails keeps its prunes: they are durable
// content-only replaces, and the surface still derives.
func TestCompactionPruneSurvivesAFailedSummary(t *testing.T) {
	l, _, big, _ := prunableLog(t)
	fail := entry{chunks: []messages.StreamChunk{failFinish(messages.LlmFailure{Message: "down", Code: "SERVER"})}}
	h := newHarness(t, newMock(overflowFinish(), fail), l,
		withCompaction(CompactionConfig{NewID: fixedIDs("cmp-f"), PruneToolResultBytes: 1000}), noRetry)
	h.followup("next")
	h.waitIdle()
	es := h.events()
	require.Contains(t, field(t, ofType(es, session.TypeCompactionEnd)[0], "error"), "down")
	require.NoError(t, session.CheckTrace(es))
	require.Len(t, ofType(es, session.TypeCompactionPrune), 1)
	rl, err := session.Restore(testHeader(), es)
	require.NoError(t, err)
	require.NotContains(t, rl.SurfaceNodes(), big)
	h.followup("again")
	h.waitIdle()
	ends := turnEnds(h.events())
	require.Equal(t, session.EndCompleted, ends[len(ends)-1].Kind)
}

func noRetry(_ *harness, c *Config) { c.NoRetry = true }
