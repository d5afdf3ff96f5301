package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/fixtures"
	"github.com/dshgo/dsh/messages"
)

func overflowFinish() entry {
	return entry{chunks: []messages.StreamChunk{failFinish(messages.LlmFailure{
		Message: "request exceeded the model context window", Code: llm.CodeContextWindowExceeded})}}
}

func fixedIDs(ids ...string) func() string {
	return func() string {
		id := ids[0]
		ids = ids[1:]
		return id
	}
}

func withCompaction(c CompactionConfig) option {
	return func(_ *harness, cfg *Config) { cfg.Compaction = c }
}

func keys(t *testing.T, e session.Event) []string {
	t.Helper()
	k := e.Data().Keys()
	slices.Sort(k)
	return k
}

func field(t *testing.T, e session.Event, key string) string {
	t.Helper()
	v, ok := e.Data().Field(key)
	require.True(t, ok, "%s has no %s", e.Type(), key)
	return v.String()
}

// fixtureKeys returns the sorted data keys of the recorded compaction
// fixture's events of type typ.
func fixtureKeys(t *testing.T, typ session.EventType) []string {
	t.Helper()
	root, err := fixtures.CorpusDir()
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(root, "headless/snapshots_compaction-recovery/session.jsonl"))
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(data), "\n") {
		var e struct {
			Type string                     `json:"type"`
			Data map[string]json.RawMessage `json:"data"`
		}
		if line == "" || json.Unmarshal([]byte(line), &e) != nil || e.Type != string(typ) {
			continue
		}
		var k []string
		for key := range e.Data {
			k = append(k, key)
		}
		slices.Sort(k)
		return k
	}
	t.Fatalf("no %s in the fixture", typ)
	return nil
}

var longPremise = strings.Repeat("premise ", 250) // ~500 estimated tokens

// Context overflow: the failed attempt is followed by the bracket and the
// retried attempt in the same step, which sees the checkpoint; the tool
// pair (the newest tool result) stays verbatim. Shapes and key sets are
// those of the recorded fixture.
func TestCompactionContextOverflow(t *testing.T) {
	mock := newMock(toolCallResponse(tc{"call-1", "echo", `{}`}), overflowFinish(), textResponse("SUMMARY"),
		textResponse("RECOVERED"))
	h := newHarness(t, mock, nil, withTools(t, fakeTool{name: "echo"}),
		withCompaction(CompactionConfig{NewID: fixedIDs("cmp-1"), MaxTokens: messages.Some(32)}))
	u := h.followup(longPremise)
	h.waitIdle()
	es := h.events()
	require.Equal(t, []session.EventType{
		session.TypeInboxSpliced, session.TypeTurnStart, session.TypeInboxSpliced, session.TypeStepStart,
		session.TypeUserMessage, session.TypeRequestHeader, session.TypeRequestContext,
		session.TypeAssistantChunk, session.TypeAssistantChunk, session.TypeAssistantChunk, session.TypeAssistantChunk,
		session.TypeAssistantChunk, session.TypeAssistantChunk,
		session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolResult, session.TypeStepEnd,
		session.TypeStepStart, session.TypeAssistantChunk,
		session.TypeCompactionStart, session.TypeCompactionSum, session.TypeUserMessage, session.TypeCompactionEnd,
		session.TypeAssistantChunk, session.TypeAssistantChunk, session.TypeAssistantChunk, session.TypeAssistantChunk,
		session.TypeAssistantChunk, session.TypeAssistantChunk, session.TypeAssistantChunk, session.TypeAssistantChunk,
		session.TypeAssistantChunk, session.TypeAssistantChunk, session.TypeAssistantChunk, session.TypeAssistantChunk,
		session.TypeAssistantChunk,
		session.TypeAssistantMessage, session.TypeStepEnd, session.TypeTurnEnd,
	}, types(es))
	userSeq := ofType(es, session.TypeUserMessage)[0].Seq()
	start, sum := ofType(es, session.TypeCompactionStart)[0], ofType(es, session.TypeCompactionSum)[0]
	cp, end := ofType(es, session.TypeUserMessage)[1], ofType(es, session.TypeCompactionEnd)[0]

	require.JSONEq(t, `{"compactionId":"cmp-1","turn":1}`, start.Data().String())
	require.JSONEq(t, `{"compactionId":"cmp-1","turn":1}`, end.Data().String())
	require.Equal(t, `[{"type":"text","text":"SUMMARY"}]`, field(t, sum, "summary"))
	require.Equal(t, `[{"type":"text","text":"SUMMARY"}]`, field(t, sum, "rawOutput"))
	require.Equal(t, `true`, field(t, sum, "llmStreamCall"))
	require.JSONEq(t, `{"start":4,"end":4}`, field(t, sum, "shadowedRange"))
	require.Equal(t, `[4]`, field(t, sum, "shadowedSeqs"))
	require.Equal(t, `"mock"`, field(t, sum, "provider"))
	require.Equal(t, `"mock-1"`, field(t, sum, "model"))
	require.Equal(t, `32`, field(t, sum, "maxTokens"))
	require.JSONEq(t, `{"inputTokens":10,"outputTokens":7}`, field(t, sum, "usage"))
	require.Equal(t, strconv.Itoa(estimateMessageTokens(u)), field(t, sum, "shadowedTokenCount"))
	require.Equal(t, fixtureKeys(t, session.TypeCompactionStart), keys(t, start))
	require.Equal(t, fixtureKeys(t, session.TypeCompactionSum), keys(t, sum))
	require.Equal(t, fixtureKeys(t, session.TypeCompactionEnd), keys(t, end))

	// The checkpoint replaces the first user message.
	require.Equal(t, int64(4), userSeq)
	require.Equal(t, session.ReplaceOp(4, 4), cp.SurfaceOp())
	src, _ := cp.SourceEventSeqs()
	require.Equal(t, []int64{start.Seq(), sum.Seq(), 4}, src)
	m := cp.Payload().(session.UserMessage).Message
	require.Equal(t, `{"kind":"plugin","plugin":"compact","compactionId":"cmp-1"}`, m.Source().JSON().String())
	require.Equal(t, compactionPreamble+"SUMMARY</compacted-summary>", texts(m))
	require.Equal(t, 3, m.NumBlocks())

	// The summariser call replays the shadowed messages under the same
	// system prompt and tools, then asks for the summary; the retried
	// attempt sees the checkpoint and the verbatim tool pair (the rig
	// checks every loop request against the log's projection).
	reqs := mock.Requests()
	require.Len(t, reqs, 4)
	sreq := reqs[2]
	require.Equal(t, purposeCompaction, sreq.Purpose())
	require.Equal(t, reqs[1].System(), sreq.System())
	require.Equal(t, len(reqs[1].Tools()), len(sreq.Tools()))
	require.Equal(t, 2, sreq.NumMessages())
	require.True(t, sreq.Message(0).Equal(u))
	require.Equal(t, compactionInstructionText, texts(sreq.Message(1)))
	retried := reqs[3]
	require.Equal(t, 3, retried.NumMessages())
	require.True(t, retried.Message(0).Equal(m))
	require.Equal(t, messages.BlockToolCall, retried.Message(1).Block(0).Type())
	require.Equal(t, messages.BlockToolResult, retried.Message(2).Block(0).Type())
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}}, turnEnds(es))
	require.Len(t, derive(es), 4, "checkpoint, tool pair, answer")
}

// A failed summary closes the bracket with an error and leaves the
// surface untouched; the overflow then takes the ordinary path (no retry)
// and the turn ends with the original failure.
func TestCompactionFailureLeavesSurface(t *testing.T) {
	mock := newMock(overflowFinish(),
		entry{chunks: []messages.StreamChunk{failFinish(messages.LlmFailure{Message: "boom", Code: "SERVER"})}})
	h := newHarness(t, mock, nil, withCompaction(CompactionConfig{NewID: fixedIDs("cmp-f")}),
		func(_ *harness, c *Config) { c.NoRetry = true })
	// A first turn gives the surface something to shadow.
	h.followup(longPremise)
	h.waitIdle()
	es := h.events()
	require.Equal(t, []session.EventType{session.TypeCompactionStart, session.TypeCompactionEnd},
		types(ofType(es, session.TypeCompactionStart, session.TypeCompactionSum, session.TypeCompactionEnd)))
	end := ofType(es, session.TypeCompactionEnd)[0]
	require.JSONEq(t, `{"compactionId":"cmp-f","turn":1,"error":"compaction summary failed: boom"}`, end.Data().String())
	require.Len(t, ofType(es, session.TypeUserMessage), 1, "no checkpoint")
	before := derive(es[:ofType(es, session.TypeCompactionStart)[0].Seq()])
	require.True(t, slices.EqualFunc(before, derive(es), messages.Message.Equal), "the surface is untouched")
	r := turnEnds(es)
	require.Len(t, r, 1)
	require.Equal(t, session.EndError, r[0].Kind)
	require.Equal(t, llm.CodeContextWindowExceeded, r[0].Error.Code)
	require.Len(t, mock.Requests(), 2)
}

// Pressure: at the second turn's pre-step the request estimate exceeds
// floor(window × 0.8); the bracket is recorded after the claim and before
// step/start, and the step's request is the compacted projection.
func TestCompactionPressure(t *testing.T) {
	mock := newMock(textResponse("ok"), textResponse("SUM"), textResponse("ok2"))
	win := int64(estimateMessageTokens(user(t, longPremise))) + 60
	h := newHarness(t, mock, nil, withCompaction(CompactionConfig{NewID: fixedIDs("cmp-p")}),
		func(_ *harness, c *Config) {
			c.Routes = func(string, string) Route { return Route{ContextWindow: messages.Some(win)} }
		})
	h.followup(longPremise)
	h.waitIdle()
	require.Empty(t, ofType(h.events(), session.TypeCompactionStart), "the first turn fits")
	h.followup("next")
	h.waitIdle()
	es := h.events()
	i := slices.IndexFunc(es, func(e session.Event) bool { return e.Type() == session.TypeCompactionStart })
	require.Positive(t, i)
	require.Equal(t, []session.EventType{session.TypeTurnStart, session.TypeInboxSpliced,
		session.TypeCompactionStart, session.TypeCompactionSum, session.TypeUserMessage, session.TypeCompactionEnd,
		session.TypeStepStart, session.TypeUserMessage}, types(es[i-2:i+6]))
	require.JSONEq(t, `{"compactionId":"cmp-p","turn":2}`, es[i].Data().String())
	require.JSONEq(t, `{"start":4,"end":4}`, field(t, es[i+1], "shadowedRange"))
	reqs := mock.Requests()
	require.Len(t, reqs, 3)
	require.Equal(t, purposeCompaction, reqs[1].Purpose())
	last := reqs[2]
	require.Equal(t, 3, last.NumMessages(), "checkpoint, the first answer, the new message")
	require.Equal(t, "compact", last.Message(0).Source().Plugin())
	require.Equal(t, "ok", texts(last.Message(1)))
	require.Equal(t, "next", texts(last.Message(2)))
}

// Manual compaction between turns: turn null; busy while a turn runs;
// nothing to compact on an empty surface (and nothing logged); a turn
// woken afterwards runs on the compacted surface.
func TestCompactionManual(t *testing.T) {
	mock := newMock(textResponse("ok"), entry{chunks: textResponse("x").chunks[:1], hang: true},
		textResponse("SUM"), textResponse("after"))
	h := newHarness(t, mock, nil, withCompaction(CompactionConfig{NewID: fixedIDs("cmp-m")}))
	h.refs++
	require.Equal(t, Compacted{Ref: h.refs, Outcome: CompactNothing}, h.ask(Compact{Ref: h.refs}))
	require.Empty(t, h.events())

	h.followup(longPremise)
	h.waitIdle()
	h.followup("second")
	h.waitStarted()
	h.waitStarted()
	h.refs++
	r := h.ask(Compact{Ref: h.refs}).(Compacted)
	require.Equal(t, CompactBusy, r.Outcome)
	h.cancel(session.CauseUser)
	h.waitIdle()

	h.refs++
	r = h.ask(Compact{Ref: h.refs}).(Compacted)
	require.Equal(t, Compacted{Ref: h.refs, Outcome: CompactDone, CompactionID: "cmp-m"}, r)
	es := h.events()
	s := ofType(es, session.TypeCompactionStart, session.TypeCompactionEnd)
	require.Len(t, s, 2)
	require.JSONEq(t, `{"compactionId":"cmp-m","turn":null}`, s[0].Data().String())
	require.JSONEq(t, `{"compactionId":"cmp-m","turn":null}`, s[1].Data().String())
	require.Equal(t, session.TypeTurnEnd, es[s[0].Seq()-1].Type(), "between turns")
	require.Equal(t, session.TypeCompactionEnd, es[len(es)-1].Type())

	h.followup("third")
	h.waitIdle()
	reqs := mock.Requests()
	last := reqs[len(reqs)-1]
	require.Equal(t, "compact", last.Message(0).Source().Plugin())
	require.Equal(t, "third", texts(last.Message(last.NumMessages()-1)))
}

// A turn woken during a manual compaction starts after the bracket.
func TestCompactionManualThenWake(t *testing.T) {
	gate := make(chan struct{})
	mock := newMock(textResponse("ok"), entry{chunks: textResponse("SUM").chunks, gate: gate},
		textResponse("after"))
	h := newHarness(t, mock, nil, withCompaction(CompactionConfig{NewID: fixedIDs("cmp-w")}))
	h.followup(longPremise)
	h.waitIdle()
	h.waitStarted()
	h.refs++
	fut := h.sys.Root.RequestFuture(h.agent, Compact{Ref: h.refs}, waitFor)
	require.Equal(t, 1, h.waitStarted(), "the summariser call")
	h.followup("woken") // committed (and its wake delivered) while the summary is pending
	close(gate)
	res, err := fut.Result()
	require.NoError(t, err)
	require.Equal(t, CompactDone, res.(Compacted).Outcome)
	h.waitIdle()
	es := h.events()
	end := ofType(es, session.TypeCompactionEnd)[0].Seq()
	starts := ofType(es, session.TypeTurnStart)
	require.Len(t, starts, 2)
	require.Greater(t, starts[1].Seq(), end)
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}, {Kind: session.EndCompleted}}, turnEnds(es))
	reqs := mock.Requests()
	require.Equal(t, "woken", texts(reqs[2].Message(reqs[2].NumMessages()-1)))
}

// A cancel during the summariser call closes the bracket with an error
// and ends the turn aborted; the surface is untouched.
func TestCompactionCancelled(t *testing.T) {
	mock := newMock(overflowFinish(), entry{hang: true})
	h := newHarness(t, mock, nil, withCompaction(CompactionConfig{NewID: fixedIDs("cmp-c")}))
	h.followup(longPremise)
	h.waitStarted()
	h.waitStarted()
	h.cancel(session.CauseUser)
	h.waitIdle()
	es := h.events()
	end := ofType(es, session.TypeCompactionEnd)
	require.Len(t, end, 1)
	require.JSONEq(t, `{"compactionId":"cmp-c","turn":1,"error":"compaction aborted"}`, end[0].Data().String())
	require.Len(t, ofType(es, session.TypeUserMessage), 1)
	require.Equal(t, session.EndAborted, turnEnds(es)[0].Kind)
	require.Equal(t, []session.EventType{session.TypeCompactionEnd, session.TypeStepEnd, session.TypeTurnEnd},
		types(es[len(es)-3:]))
}

// ---- the core alone --------------------------------------------------------

type logBuilder struct {
	t *testing.T
	l *session.Log
}

func newLogBuilder(t *testing.T) *logBuilder {
	l, err := session.New(testHeader())
	require.NoError(t, err)
	return &logBuilder{t: t, l: l}
}

func (b *logBuilder) add(d session.Draft) int64 {
	b.t.Helper()
	e, err := b.l.Append(d, 1)
	require.NoError(b.t, err)
	return e.Seq()
}

// begin opens turn 1 step 1; end closes them.
func (b *logBuilder) begin() {
	b.add(session.TurnStart{Turn: 1}.Draft())
	b.add(session.StepStart{Turn: 1, Step: 1}.Draft())
}

func (b *logBuilder) end() {
	b.add(session.StepEnd{Turn: 1, Step: 1}.Draft())
	b.add(session.TurnEnd{Turn: 1, Reason: session.TurnEndReason{Kind: session.EndCompleted}}.Draft())
}

func (b *logBuilder) user(text string) int64 {
	return b.add(session.UserMessage{Message: user(b.t, text)}.Draft())
}

func (b *logBuilder) assistant(blocks ...messages.ContentBlock) int64 {
	m, err := messages.NewAssistantMessage(blocks, messages.ModelSource{Provider: "mock", Model: "mock-1"})
	require.NoError(b.t, err)
	return b.add(session.AssistantMessage{Turn: 1, Step: 1, Message: m}.Draft().WithSources(nil))
}

func (b *logBuilder) pair(id, args, result string) (int64, int64) {
	a := b.assistant(messages.ToolCallBlock(id, "echo", args))
	c := b.add(session.ToolCall{Turn: 1, Step: 1, CallID: id, Name: "echo", Arguments: args}.Draft())
	r := b.add(session.ToolResult{Turn: 1, Step: 1, Message: messages.NewToolResultMessage(id,
		[]messages.ContentBlock{messages.TextBlock(result)}, messages.ToolSucceeded)}.Draft().WithSources([]int64{c}))
	return a, r
}

func (b *logBuilder) driver() *driver {
	b.t.Helper()
	d, err := newDriver(driverConfig{Provider: "mock", Model: "mock-1"}, b.l.Header(), b.l.Events().Slice())
	require.NoError(b.t, err)
	return d
}

// The edge never separates a tool call from its result: a cut that would
// retain the result but shadow its call moves back; a cut after a
// complete pair shadows the pair.
func TestCompactionRangeKeepsToolPairs(t *testing.T) {
	t.Run("moves back", func(t *testing.T) {
		b := newLogBuilder(t)
		b.begin()
		u := b.user("hello")
		b.pair("c1", `{"x":"`+strings.Repeat("y", 1600)+`"}`, "done")
		b.assistant(messages.TextBlock("fine"))
		b.end()
		nodes, msgs, _, err := b.driver().compactionRange()
		require.NoError(t, err)
		require.Equal(t, []int64{u}, nodes)
		require.Len(t, msgs, 1)
	})
	t.Run("shadows the pair", func(t *testing.T) {
		b := newLogBuilder(t)
		b.begin()
		u := b.user(longPremise)
		b.pair("c1", `{}`, "done")
		a2 := b.assistant(messages.TextBlock(longPremise))
		b.user("last")
		b.end()
		nodes, _, tokens, err := b.driver().compactionRange()
		require.NoError(t, err)
		require.Equal(t, u, nodes[0])
		require.Equal(t, a2, nodes[len(nodes)-1])
		require.Len(t, nodes, 4)
		require.Positive(t, tokens)
	})
	t.Run("a lone pair is never split", func(t *testing.T) {
		b := newLogBuilder(t)
		b.begin()
		b.pair("c1", `{"x":"`+strings.Repeat("y", 1600)+`"}`, "done")
		b.end()
		nodes, _, _, err := b.driver().compactionRange()
		require.NoError(t, err)
		require.Empty(t, nodes)
	})
}

// The lock: an unmatched compaction/start after the newest
// session/end-seed is live (busy); one before it is stale.
func TestCompactionLock(t *testing.T) {
	b := newLogBuilder(t)
	b.begin()
	b.user(longPremise)
	b.assistant(messages.TextBlock("ok"))
	b.end()
	b.add(session.NewDraft(session.TypeCompactionStart, messages.MustParseJSON(`{"compactionId":"x","turn":null}`)))
	d := b.driver()
	eff, err := d.Step(compactRequested{Ref: 7})
	require.NoError(t, err)
	require.Equal(t, effects{compactDoneEffect{Ref: 7, Outcome: CompactBusy, Err: errCompactBusy.Error()}}, eff)

	seeded, err := session.NewSeeded(testHeader(), b.l.Events().Slice(), 1)
	require.NoError(t, err)
	d, err = newDriver(driverConfig{Provider: "mock", Model: "mock-1",
		Compaction: CompactionConfig{NewID: fixedIDs("y")}}, seeded.Header(), seeded.Events().Slice())
	require.NoError(t, err)
	eff, err = d.Step(compactRequested{Ref: 8})
	require.NoError(t, err)
	require.Len(t, eff, 1)
	app, ok := eff[0].(appendEffect)
	require.True(t, ok, "%#v", eff)
	require.Equal(t, session.TypeCompactionStart, app.Drafts[0].Type())
}

// Resume after a compaction: a new agent over the compacted log requests
// the compacted projection (the rig checks it against the log).
func TestCompactionResume(t *testing.T) {
	mock := newMock(toolCallResponse(tc{"call-1", "echo", `{}`}), overflowFinish(), textResponse("SUMMARY"),
		textResponse("RECOVERED"))
	h := newHarness(t, mock, nil, withTools(t, fakeTool{name: "echo"}),
		withCompaction(CompactionConfig{NewID: fixedIDs("cmp-r")}))
	h.followup(longPremise)
	h.waitIdle()
	es := h.events()
	l, err := session.Restore(testHeader(), es)
	require.NoError(t, err)

	mock2 := newMock(textResponse("again"))
	h2 := newHarness(t, mock2, l, withTools(t, fakeTool{name: "echo"}))
	h2.followup("continue")
	h2.waitIdle()
	reqs := mock2.Requests()
	require.Len(t, reqs, 1)
	require.Equal(t, "compact", reqs[0].Message(0).Source().Plugin())
	require.Equal(t, 5, reqs[0].NumMessages(), "checkpoint, tool pair, recovered answer, new message")
	es2 := h2.events()
	rh := ofType(es2[len(es):], session.TypeRequestHeader)
	require.Len(t, rh, 1)
	require.Equal(t, session.ReasonResume, rh[0].Payload().(session.RequestHeader).Reason)
}
