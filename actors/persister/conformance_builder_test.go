package persister

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// ---- helpers ----

// storeTestNow is the epoch-ms clock of the store tests; a builder stamps
// each event one ms after the previous one.
const storeTestNow int64 = 1_700_000_000_000

var storeTestModel = messages.ModelSource{Provider: "deepseek-official", Model: "deepseek-v4-flash"}

// logBuilder builds a session log that obeys the session trace
// (docs/session-log.md#invariants): builds with -race run the trace checker
// inside Log.Append.
type logBuilder struct {
	t   testing.TB
	l   *session.Log
	now int64
}

func storeTestHeader(id session.SessionID) session.Header {
	return session.Header{ID: id, CreatedAt: storeTestNow, Cwd: "/work/project"}
}

// newLogBuilder returns a builder of a fresh, empty log.
func newLogBuilder(t testing.TB, id session.SessionID) *logBuilder {
	t.Helper()
	l, err := session.New(storeTestHeader(id))
	require.NoError(t, err)
	return &logBuilder{t: t, l: l, now: storeTestNow}
}

// restoreBuilder returns a builder continuing the given events (as a writer
// that loaded them would, without an end-seed).
func restoreBuilder(t testing.TB, h session.Header, events []session.Event) *logBuilder {
	t.Helper()
	l, err := session.Restore(h, events)
	require.NoError(t, err)
	now := storeTestNow
	if len(events) > 0 {
		now = events[len(events)-1].Time()
	}
	return &logBuilder{t: t, l: l, now: now}
}

func (b *logBuilder) id() session.SessionID          { return b.l.ID() }
func (b *logBuilder) header() session.Header         { return b.l.Header() }
func (b *logBuilder) len() int64                     { return b.l.Len() }
func (b *logBuilder) events() []session.Event        { return b.l.Events().Slice() }
func (b *logBuilder) from(seq int64) []session.Event { return b.l.EventsFrom(seq).Slice() }

// add appends d one ms after the previous event.
func (b *logBuilder) add(d session.Draft) session.Event {
	b.t.Helper()
	b.now++
	e, err := b.l.Append(d, b.now)
	require.NoError(b.t, err)
	return e
}

// user appends a user message holding text.
func (b *logBuilder) user(text string) session.Event {
	b.t.Helper()
	m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(text)}, messages.UserSource())
	require.NoError(b.t, err)
	return b.add(session.UserMessage{Message: m}.Draft())
}

// beginTurn appends turn/start, numbered after the last turn, and the
// prompt. It returns the turn.
func (b *logBuilder) beginTurn(prompt string) int64 {
	b.t.Helper()
	turn := b.l.Turns() + 1
	b.add(session.TurnStart{Turn: turn}.Draft())
	b.user(prompt)
	return turn
}

// beginStep appends step/start and, before the log's first request, the
// request header.
func (b *logBuilder) beginStep(turn, step int64) {
	b.t.Helper()
	b.add(session.StepStart{Turn: turn, Step: step}.Draft())
	if _, ok := b.l.RequestHeader(); !ok {
		cfg := messages.CallConfig{Provider: storeTestModel.Provider, Model: storeTestModel.Model}
		h := session.NewEpochHeader(cfg, session.AdapterDefaults{}, "system", nil)
		b.add(session.RequestHeader{Header: h, Reason: session.ReasonInitial}.Draft())
	}
}

// assistant appends one streamed chunk and the assistant message it
// anchors, holding blocks.
func (b *logBuilder) assistant(turn, step int64, blocks ...messages.ContentBlock) session.Event {
	b.t.Helper()
	chunk := b.add(session.AssistantChunk{Turn: turn, Step: step, Chunk: messages.TextDeltaChunk(0, "thinking it over")}.Draft())
	m, err := messages.NewAssistantMessage(blocks, storeTestModel)
	require.NoError(b.t, err)
	a := session.AssistantMessage{Turn: turn, Step: step, Message: m,
		Usage: messages.TokenUsage{InputTokens: 10, OutputTokens: 5}, HasUsage: true}
	return b.add(a.Draft().WithSources([]int64{chunk.Seq()}))
}

// toolRequest appends an assistant message asking for the tool calls.
func (b *logBuilder) toolRequest(turn, step int64, callIDs ...string) {
	b.t.Helper()
	blocks := []messages.ContentBlock{messages.TextBlock("thinking it over")}
	for _, id := range callIDs {
		blocks = append(blocks, messages.ToolCallBlock(id, "shell", fmt.Sprintf(`{"id":%q}`, id)))
	}
	b.assistant(turn, step, blocks...)
}

// toolCall records that call callID started; it returns the tool/call seq.
func (b *logBuilder) toolCall(turn, step int64, callID string) int64 {
	b.t.Helper()
	c := session.ToolCall{Turn: turn, Step: step, CallID: callID, Name: "shell", Arguments: fmt.Sprintf(`{"id":%q}`, callID)}
	return b.add(c.Draft()).Seq()
}

// toolResult appends the result of callID, citing its tool/call.
func (b *logBuilder) toolResult(turn, step int64, callID string, callSeq int64) {
	b.t.Helper()
	m := messages.NewToolResultMessage(callID, []messages.ContentBlock{messages.TextBlock("ok: " + callID)}, messages.ToolSucceeded)
	b.add(session.ToolResult{Turn: turn, Step: step, Message: m}.Draft().WithSources([]int64{callSeq}))
}

// endTurn appends turn/end {completed}; the step must be closed.
func (b *logBuilder) endTurn(turn int64) {
	b.t.Helper()
	b.add(session.TurnEnd{Turn: turn, Reason: session.TurnEndReason{Kind: session.EndCompleted}}.Draft())
}

// textTurn appends a complete one-step text turn.
func (b *logBuilder) textTurn(prompt, reply string) {
	b.t.Helper()
	turn := b.beginTurn(prompt)
	b.beginStep(turn, 1)
	b.assistant(turn, 1, messages.TextBlock(reply))
	b.add(session.StepEnd{Turn: turn, Step: 1}.Draft())
	b.endTurn(turn)
}

// toolTurn appends a complete two-step turn: a tool call with its result,
// then a text answer.
func (b *logBuilder) toolTurn(callID string) {
	b.t.Helper()
	turn := b.beginTurn("run " + callID)
	b.beginStep(turn, 1)
	b.toolRequest(turn, 1, callID)
	b.toolResult(turn, 1, callID, b.toolCall(turn, 1, callID))
	b.add(session.StepEnd{Turn: turn, Step: 1}.Draft())
	b.beginStep(turn, 2)
	b.assistant(turn, 2, messages.TextBlock("done with "+callID))
	b.add(session.StepEnd{Turn: turn, Step: 2}.Draft())
	b.endTurn(turn)
}

// loadBalanced loads id and checks the result is balanced: it obeys the
// session trace and needs no further repair.
func loadBalanced(t testing.TB, s Store, id session.SessionID) Stored {
	t.Helper()
	got, err := s.Load(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, id, got.Header.ID)
	require.NoError(t, session.CheckTrace(got.Events))
	require.Empty(t, session.InterruptedTurnClosers(got.Events), "Load must return a balanced log")
	return got
}

// revisionOf returns id's revision as List reports it.
func revisionOf(t testing.TB, s Store, id session.SessionID) Revision {
	t.Helper()
	listed, err := s.List(t.Context())
	require.NoError(t, err)
	for _, l := range listed {
		if l.Header.ID == id {
			return l.Revision
		}
	}
	require.FailNow(t, "session not listed", "%s", id)
	return ""
}

// requireListed checks List names exactly ids, in that order.
func requireListed(t testing.TB, s Store, ids ...session.SessionID) {
	t.Helper()
	listed, err := s.List(t.Context())
	require.NoError(t, err)
	got := make([]session.SessionID, 0, len(listed))
	for _, l := range listed {
		got = append(got, l.Header.ID)
	}
	require.Equal(t, append([]session.SessionID{}, ids...), got)
}

// requireFenced checks err is a *FenceError for id wanting seq want and
// given seq got.
func requireFenced(t testing.TB, err error, id session.SessionID, want, got int64) {
	t.Helper()
	require.ErrorIs(t, err, ErrFenced)
	var fe *FenceError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, FenceError{ID: id, Want: want, Got: got}, *fe)
}

func requireSameEvents(t testing.TB, want, got []session.Event) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.Truef(t, want[i].Equal(got[i]), "event %d: want %d %s %s, got %d %s %s", i,
			want[i].Seq(), want[i].Type(), want[i].Data(), got[i].Seq(), got[i].Type(), got[i].Data())
	}
}

// requireInterruptedEnd checks a turn/end {interrupted} closer of turn.
func requireInterruptedEnd(t testing.TB, e session.Event, turn int64) {
	t.Helper()
	require.Equal(t, session.TypeTurnEnd, e.Type())
	end, ok := e.Payload().(session.TurnEnd)
	require.True(t, ok)
	require.Equal(t, turn, end.Turn)
	require.Equal(t, session.EndInterrupted, end.Reason.Kind)
}

// toolErrorOf returns the typed error of a tool/result event.
func toolErrorOf(t testing.TB, e session.Event) session.ToolError {
	t.Helper()
	r, ok := e.Payload().(session.ToolResult)
	require.True(t, ok, "%s is not a tool/result", e.Type())
	return r.Error
}

// toolResultText returns the text of a tool/result's result block.
func toolResultText(t testing.TB, e session.Event) string {
	t.Helper()
	m, ok := e.Message()
	require.True(t, ok)
	require.Equal(t, 1, m.NumBlocks())
	var sb strings.Builder
	for blk := range m.Block(0).NestedBlocks() {
		sb.WriteString(blk.Text())
	}
	return sb.String()
}
