package persister

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// turnScript builds the drafts of realistic turns (the mix of
// docs/performance.md#targets): turn and step boundaries, a user message, a
// request header, text-delta chunks, an assistant message asking for a tool,
// the tool call and its result, the end of the turn. Shared by the core,
// actor and benchmark tests.
type turnScript struct {
	turn   int64
	header session.EpochHeader
	user   messages.Message
	answer messages.Message
	result messages.Message
	delta  messages.StreamChunk
}

func newTurnScript() *turnScript {
	user, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("list the files")}, messages.UserSource())
	if err != nil {
		panic(err)
	}
	answer, err := messages.NewAssistantMessage([]messages.ContentBlock{
		messages.TextBlock("Let me look."), messages.ToolCallBlock("c1", "ls", `{"path":"."}`),
	}, messages.ModelSource{Provider: "synthetic", Model: "s1"})
	if err != nil {
		panic(err)
	}
	cfg := messages.CallConfig{Provider: "synthetic", Model: "s1"}
	return &turnScript{
		header: session.NewEpochHeader(cfg, session.AdapterDefaults{}, "you are terse", nil),
		user:   user, answer: answer,
		result: messages.NewToolResultMessage("c1", []messages.ContentBlock{messages.TextBlock("a.go b.go")}, messages.ToolSucceeded),
		delta:  messages.TextDeltaChunk(0, "tok "),
	}
}

// turnLen is the number of events of a turn with chunks deltas.
func turnLen(chunks int) int { return 9 + chunks }

// next returns the drafts of the next complete turn, with chunks deltas:
// turn/start, user/message, step/start, request/header, the deltas,
// assistant/message, tool/call, tool/result, step/end, turn/end.
func (s *turnScript) next(chunks int) []session.Draft {
	s.turn++
	t := s.turn
	reason := session.ReasonResume
	if t == 1 {
		reason = session.ReasonInitial
	}
	ds := make([]session.Draft, 0, turnLen(chunks))
	ds = append(ds,
		session.TurnStart{Turn: t}.Draft(),
		session.UserMessage{Message: s.user}.Draft(),
		session.StepStart{Turn: t, Step: 1}.Draft(),
		session.RequestHeader{Header: s.header, Reason: reason}.Draft())
	for range chunks {
		ds = append(ds, session.AssistantChunk{Turn: t, Step: 1, Chunk: s.delta}.Draft())
	}
	return append(ds,
		session.AssistantMessage{Turn: t, Step: 1, Message: s.answer}.Draft(),
		session.ToolCall{Turn: t, Step: 1, CallID: "c1", Name: "ls", Arguments: `{"path":"."}`}.Draft(),
		session.ToolResult{Turn: t, Step: 1, Message: s.result}.Draft(),
		session.StepEnd{Turn: t, Step: 1}.Draft(),
		session.TurnEnd{Turn: t, Reason: session.TurnEndReason{Kind: session.EndCompleted}}.Draft())
}

// userDrafts returns n user messages: events no policy treats as a
// checkpoint.
func wbUserDrafts(n int) []session.Draft {
	ds := make([]session.Draft, n)
	for i := range ds {
		m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(fmt.Sprintf("u%d", i))}, messages.UserSource())
		if err != nil {
			panic(err)
		}
		ds[i] = session.UserMessage{Message: m}.Draft()
	}
	return ds
}

func wbHeader(id string) session.Header {
	return session.Header{ID: session.SessionID(id), CreatedAt: 1, Cwd: "/work/project"}
}

// coreHarness drives one writeBehind the way the shard does, with a fake
// clock and one fake timer, and renders every effect as a line so a test
// reads as a transcript: messages in, effects out.
type coreHarness struct {
	t     *testing.T
	s     *writeBehind[string]
	l     *session.Log
	ts    *turnScript
	base  time.Time
	now   time.Duration
	armed bool
	at    time.Duration // when the armed timer fires
	gen   uint64        // the armed timer's gen
	write uint64        // the write in flight, 0 if none
	sync  bool          // the write in flight syncs (asked so, or promoted)
	// started says the write in flight has started: a Promote then finds
	// it too late, and it completes unsynced; unless running says its
	// store call is still running, and then the Promote folds late.
	started bool
	running bool
}

func newCoreHarness(t *testing.T, policy Policy) *coreHarness {
	t.Helper()
	l, err := session.New(wbHeader("core"))
	require.NoError(t, err)
	h := &coreHarness{t: t, l: l, ts: newTurnScript(), base: time.Unix(1_700_000_000, 0)}
	h.s = newWriteBehind[string](policy, 200*time.Millisecond, 8, 0)
	return h
}

// commit appends drafts to the log at the current time and enqueues the
// committed events.
func (h *coreHarness) commit(ds ...session.Draft) []string {
	h.t.Helper()
	evs, err := h.l.AppendBatch(ds, h.base.Add(h.now).UnixMilli())
	require.NoError(h.t, err)
	e, err := h.s.Enqueue(session.EventsOf(evs), h.base.Add(h.now))
	require.NoError(h.t, err)
	return h.render(e)
}

// users commits n user messages at time ms.
func (h *coreHarness) users(ms, n int) []string {
	h.t.Helper()
	h.now = time.Duration(ms) * time.Millisecond
	return h.commit(wbUserDrafts(n)...)
}

// advance moves the clock to ms, firing the timer on the way if it is due.
func (h *coreHarness) advance(ms int) []string {
	h.t.Helper()
	to := time.Duration(ms) * time.Millisecond
	require.GreaterOrEqual(h.t, to, h.now, "time goes forward")
	var out []string
	if h.armed && h.at <= to {
		h.now = h.at
		h.armed = false
		out = h.render(h.s.Tick(h.gen))
	}
	h.now = to
	return out
}

// done completes the write in flight with err.
func (h *coreHarness) done(err error) []string {
	h.t.Helper()
	require.NotZero(h.t, h.write, "no write in flight")
	gen, sync := h.write, h.sync
	h.write, h.sync, h.started, h.running = 0, false, false, false
	e, werr := h.s.WriteDone(gen, sync, err)
	require.NoError(h.t, werr)
	return h.render(e)
}

func (h *coreHarness) flush(w string, upTo int64) []string {
	return h.render(h.s.Flush(w, upTo))
}

func (h *coreHarness) drain(w string) []string {
	return h.render(h.s.Drain(w))
}

func (h *coreHarness) render(e effects[string]) []string {
	h.t.Helper()
	var out []string
	if e.CancelTimer {
		require.True(h.t, h.armed, "cancel without a timer")
		h.armed = false
		out = append(out, "cancel timer")
	}
	if e.ArmTimer {
		h.armed, h.at, h.gen = true, e.TimerAt.Sub(h.base), e.TimerGen
		out = append(out, fmt.Sprintf("arm timer @%dms", h.at.Milliseconds()))
	}
	if e.Promote {
		require.NotZero(h.t, h.write, "promote without a write in flight")
		require.Equal(h.t, h.write, e.WriteGen, "promote of another write")
		switch {
		case h.started && h.running:
			h.sync = true
			out = append(out, "promote late "+batchSeqs(h.s.Fold(e.WriteGen, true)))
		case h.started:
			out = append(out, "promote (too late)")
		default:
			h.sync = true
			out = append(out, "promote "+batchSeqs(h.s.Fold(e.WriteGen, false)))
		}
	}
	if e.StartWrite {
		require.Zero(h.t, h.write, "a second write while one is in flight")
		h.write, h.sync = e.WriteGen, e.Sync
		if e.Sync {
			out = append(out, "write+sync "+batchSeqs(e.Write))
		} else {
			out = append(out, "write "+batchSeqs(e.Write))
		}
	}
	for _, r := range e.Replies {
		if r.Err != nil {
			out = append(out, fmt.Sprintf("flush-failed %s durable=%d: %v", r.W, r.Durable, r.Err))
		} else {
			out = append(out, fmt.Sprintf("flushed %s durable=%d", r.W, r.Durable))
		}
	}
	if e.HasDurable {
		out = append(out, fmt.Sprintf("owner durable %d", e.Durable))
	}
	if e.WriteFailed != nil {
		out = append(out, fmt.Sprintf("owner write-failed: %v", e.WriteFailed))
	}
	return out
}

// seqs renders a batch as its seqs, "[0 1 2]".
func batchSeqs(evs []session.Event) string {
	s := make([]int64, len(evs))
	for i, e := range evs {
		s[i] = e.Seq()
	}
	return fmt.Sprint(s)
}

var errWriteDisk = errors.New("disk on fire")

// Scenario 90 (write-behind.spec.ts), first case.
func TestCoreUsesOneFixedWindowFromTheFirstQueuedEvent(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	require.Equal(t, []string{"arm timer @200ms"}, h.users(0, 1))
	require.Empty(t, h.users(150, 1), "a later event does not move the window")
	require.Empty(t, h.advance(199))
	require.Equal(t, []string{"write [0 1]"}, h.advance(200))
	require.Empty(t, h.done(nil), "a background write is not synced: nothing is durable")
	require.Equal(t, int64(1), h.s.Written())
	require.Equal(t, int64(-1), h.s.Durable())
}

// Scenario 90, second case.
func TestCoreTwentyEventsTenMillisecondsApartAreOneBatch(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	h.s.maxBatch = 4096
	var out []string
	for i := range 20 {
		out = append(out, h.users(i*10, 1)...)
	}
	require.Equal(t, []string{"arm timer @200ms"}, out)
	require.Equal(t, []string{"write [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19]"}, h.advance(200))
	require.Empty(t, h.done(nil))
}

// Scenario 90, third case.
func TestCorePausesAutomaticRetriesAfterFailure(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	require.Equal(t, []string{"arm timer @200ms"}, h.users(0, 1))
	require.Equal(t, []string{"write [0]"}, h.advance(200))
	require.Equal(t, []string{"owner write-failed: disk on fire"}, h.done(errWriteDisk))
	require.Empty(t, h.advance(5000), "no automatic retry while paused")
	require.Equal(t, []string{"arm timer @5200ms"}, h.users(5000, 1), "the next enqueue resumes the timer")
	require.Empty(t, h.advance(5199))
	require.Equal(t, []string{"write [0 1]"}, h.advance(5200), "old and new together")
	require.Empty(t, h.done(nil))
	require.Equal(t, int64(1), h.s.Written())
}

func TestCoreTailOfAWriteKeepsItsOwnTimer(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	h.users(0, 1)
	require.Equal(t, []string{"write [0]"}, h.advance(200))
	require.Equal(t, []string{"arm timer @450ms"}, h.users(250, 1), "an enqueue onto the empty queue during a write")
	require.Empty(t, h.done(nil), "the unexpired tail keeps waiting")
	require.Equal(t, []string{"write [1]"}, h.advance(450))
	require.Empty(t, h.done(nil))
}

func TestCoreExpiredTailStartsWhenTheWriteFinishes(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	h.users(0, 1)
	require.Equal(t, []string{"write [0]"}, h.advance(200))
	require.Equal(t, []string{"arm timer @450ms"}, h.users(250, 1))
	require.Empty(t, h.users(300, 1))
	require.Empty(t, h.advance(450), "the tail's deadline expires during the write")
	require.Equal(t, []string{"write [1 2]"}, h.done(nil), "the tail starts immediately")
	require.Empty(t, h.done(nil))
}

func TestCoreFlushCancelsTheTimerAndWritesUntilEmpty(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	h.users(0, 2)
	require.Equal(t, []string{"cancel timer", "write+sync [0 1]"}, h.flush("a", -1))
	// Events and flushes during the write join the next batch.
	require.Empty(t, h.users(10, 1), "no timer during a barrier")
	require.Empty(t, h.flush("b", -1))
	require.Equal(t, []string{"write+sync [2]", "flushed a durable=1", "owner durable 1"}, h.done(nil))
	require.Equal(t, []string{"flushed b durable=2", "owner durable 2"}, h.done(nil))
	// Admission closed on the empty queue: later events start a fresh window.
	require.Equal(t, []string{"arm timer @300ms"}, h.users(100, 1))
}

func TestCoreFlushOfNothingAnswersAtOnce(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	require.Equal(t, []string{"flushed a durable=-1"}, h.flush("a", -1))
	h.users(0, 1)
	h.advance(200)
	require.Empty(t, h.done(nil))
	// Written up to 0 but not synced: the barrier is a sync alone.
	require.Equal(t, []string{"write+sync []"}, h.flush("b", 0))
	require.Equal(t, []string{"flushed b durable=0", "owner durable 0"}, h.done(nil))
	require.Equal(t, []string{"flushed c durable=0"}, h.flush("c", 0))
}

func TestCoreBarrierSyncsWhatBackgroundWritesWrote(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	h.users(0, 2)
	require.Equal(t, []string{"write [0 1]"}, h.advance(200))
	require.Empty(t, h.done(nil))
	h.users(300, 1)
	require.Equal(t, []string{"write [2]"}, h.advance(500))
	require.Empty(t, h.done(nil))
	require.Equal(t, int64(-1), h.s.Durable())
	require.Equal(t, 3, h.s.Pending(), "written, not durable")
	require.Equal(t, []string{"write+sync []"}, h.drain("u"))
	require.Equal(t, []string{"flushed u durable=2", "owner durable 2"}, h.done(nil))
	require.Equal(t, 0, h.s.Pending())
}

// A barrier that fails takes back everything written since the last sync:
// the store cut it off (Writer.Append), so it is written again.
func TestCoreFailedBarrierRequeuesWhatWasWrittenUnsynced(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	h.users(0, 2)
	h.advance(200)
	require.Empty(t, h.done(nil))
	require.Equal(t, []string{"arm timer @500ms"}, h.users(300, 1))
	require.Equal(t, []string{"cancel timer", "write+sync [2]"}, h.flush("a", -1))
	require.Equal(t, []string{"flush-failed a durable=-1: disk on fire", "owner write-failed: disk on fire"}, h.done(errWriteDisk))
	require.Equal(t, int64(-1), h.s.Written())
	require.Equal(t, 3, h.s.Pending())
	require.Equal(t, []string{"write+sync [0 1 2]"}, h.flush("b", -1))
	require.Equal(t, []string{"flushed b durable=2", "owner durable 2"}, h.done(nil))
}

// A failed background write takes back what earlier ones wrote too.
func TestCoreFailedBackgroundWriteRequeuesWhatWasWrittenUnsynced(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	h.users(0, 1)
	h.advance(200)
	require.Empty(t, h.done(nil))
	h.users(300, 1)
	require.Equal(t, []string{"write [1]"}, h.advance(500))
	require.Equal(t, []string{"owner write-failed: disk on fire"}, h.done(errWriteDisk))
	require.Equal(t, []string{"arm timer @5200ms"}, h.users(5000, 1))
	require.Equal(t, []string{"write [0 1 2]"}, h.advance(5200))
	require.Empty(t, h.done(nil))
}

// A barrier that finds its session's background write queued, not started,
// promotes it, and what arrived since folds into it: one write, one sync,
// for the batch and the barrier.
func TestCoreBarrierFoldsAQueuedBackgroundWrite(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	h.users(0, 2)
	require.Equal(t, []string{"write [0 1]"}, h.advance(200))
	require.Equal(t, []string{"arm timer @450ms"}, h.users(250, 1))
	require.Equal(t, []string{"cancel timer", "promote [0 1 2]"}, h.flush("a", -1))
	require.Equal(t, []string{"flushed a durable=2", "owner durable 2"}, h.done(nil))
	require.Equal(t, 0, h.s.Pending())
	require.Empty(t, h.advance(1000), "nothing more to write")
}

func TestCoreFlushJoinsAnOverlappingBackgroundWrite(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	h.users(0, 1)
	require.Equal(t, []string{"write [0]"}, h.advance(200))
	h.started = true
	require.Equal(t, []string{"arm timer @410ms"}, h.users(210, 1))
	require.Equal(t, []string{"cancel timer", "promote (too late)"}, h.flush("a", -1), "waits for the write in flight")
	require.Equal(t, []string{"write+sync [1]"}, h.done(nil))
	require.Equal(t, []string{"flushed a durable=1", "owner durable 1"}, h.done(nil))
}

// A barrier that comes while a background write's store call runs folds
// into it late: the same write appends the queue after the batch, synced,
// and the barrier needs no write of its own.
func TestCoreBarrierFoldsLateIntoARunningBackgroundWrite(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	h.users(0, 1)
	require.Equal(t, []string{"write [0]"}, h.advance(200))
	h.started, h.running = true, true
	require.Equal(t, []string{"arm timer @410ms"}, h.users(210, 1))
	require.Equal(t, []string{"cancel timer", "promote late [0 1]"}, h.flush("a", -1))
	require.Equal(t, []string{"flushed a durable=1", "owner durable 1"}, h.done(nil), "one write, synced")
	require.Zero(t, h.s.Pending())
	require.Empty(t, h.advance(1000), "nothing more to write")
}

// A late fold whose background batch fails is still a background write
// that the barrier overlaps: the barrier writes everything again itself,
// and only its own failure would fail the waiter.
func TestCoreLateFoldOfAFailedBackgroundWriteIsRetriedByTheBarrier(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	h.users(0, 1)
	require.Equal(t, []string{"write [0]"}, h.advance(200))
	h.started, h.running = true, true
	h.users(210, 1)
	require.Equal(t, []string{"cancel timer", "promote late [0 1]"}, h.flush("a", -1))
	h.sync = false // the background batch's call failed: the fold's part never ran
	require.Equal(t, []string{"write+sync [0 1]", "owner write-failed: disk on fire"}, h.done(errWriteDisk))
	require.Equal(t, []string{"flushed a durable=1", "owner durable 1"}, h.done(nil))
}

func TestCoreBarrierRetriesAFailedOverlappingWriteThenFails(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	h.users(0, 1)
	require.Equal(t, []string{"write [0]"}, h.advance(200))
	h.started = true
	require.Equal(t, []string{"promote (too late)"}, h.flush("a", -1))
	// The background write fails: the barrier retries it at once.
	require.Equal(t, []string{"write+sync [0]", "owner write-failed: disk on fire"}, h.done(errWriteDisk))
	// The barrier's own write fails: its waiter fails, the batch is kept.
	require.Equal(t, []string{"flush-failed a durable=-1: disk on fire", "owner write-failed: disk on fire"}, h.done(errWriteDisk))
	require.Equal(t, 1, h.s.Pending())
	// A later flush retries and succeeds.
	require.Equal(t, []string{"write+sync [0]"}, h.flush("b", -1))
	require.Equal(t, []string{"flushed b durable=0", "owner durable 0"}, h.done(nil))
}

func TestCoreFailedFlushKeepsTheBatchInOrder(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	h.users(0, 2)
	require.Equal(t, []string{"cancel timer", "write+sync [0 1]"}, h.flush("a", -1))
	require.Empty(t, h.users(10, 1))
	require.Equal(t, []string{"flush-failed a durable=-1: disk on fire", "owner write-failed: disk on fire"}, h.done(errWriteDisk))
	require.Empty(t, h.advance(1000), "paused")
	require.Equal(t, []string{"arm timer @1210ms"}, h.users(1010, 1))
	require.Equal(t, []string{"write [0 1 2 3]"}, h.advance(1210), "the failed batch first, then the rest")
	require.Empty(t, h.done(nil))
}

func TestCoreFlushUpToWaitsForEventsToArrive(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	h.users(0, 1)
	require.Empty(t, h.flush("a", 2), "seq 2 has not arrived")
	require.Empty(t, h.users(10, 1), "seq 1 is not enough")
	require.Equal(t, []string{"cancel timer", "write+sync [0 1 2]"}, h.users(20, 1))
	require.Equal(t, []string{"flushed a durable=2", "owner durable 2"}, h.done(nil))
}

func TestCoreTurnEndIsACheckpoint(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	h.s.maxBatch = 4096
	ds := h.ts.next(2)                                                  // 11 events, seqs 0..10
	require.Equal(t, []string{"arm timer @200ms"}, h.commit(ds[:4]...)) // up to request/header: no checkpoint
	h.now = 10 * time.Millisecond
	require.Equal(t, []string{"cancel timer", "write+sync [0 1 2 3 4 5 6 7 8 9 10]"}, h.commit(ds[4:]...))
	require.Equal(t, []string{"owner durable 10"}, h.done(nil))
}

func TestCoreStrictPolicyCheckpointsRequestHeaderAndToolCall(t *testing.T) {
	h := newCoreHarness(t, PolicyStrict)
	h.s.maxBatch = 4096
	ds := h.ts.next(2) // seqs: 3 request/header, 7 tool/call, 10 turn/end
	require.Equal(t, []string{"arm timer @200ms"}, h.commit(ds[:3]...))
	require.Equal(t, []string{"cancel timer", "write+sync [0 1 2 3]"}, h.commit(ds[3]))
	require.Empty(t, h.commit(ds[4:7]...), "chunks join the barrier")
	require.Equal(t, []string{"write+sync [4 5 6]", "owner durable 3"}, h.done(nil))
	require.Empty(t, h.commit(ds[7]), "tool/call: the barrier is still running")
	require.Equal(t, []string{"write+sync [7]", "owner durable 6"}, h.done(nil))
	require.Equal(t, []string{"owner durable 7"}, h.done(nil))
	require.Equal(t, []string{"arm timer @200ms"}, h.commit(ds[8]), "tool/result is not a checkpoint")
	require.Equal(t, []string{"cancel timer", "write+sync [8 9 10]"}, h.commit(ds[9:]...))
}

func TestCoreSizeBoundWritesEarly(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd) // maxBatch 8
	require.Equal(t, []string{"arm timer @200ms"}, h.users(0, 5))
	require.Equal(t, []string{"cancel timer", "write [0 1 2 3 4 5 6 7]"}, h.users(1, 3), "a background write: not synced")
	require.Equal(t, []string{"arm timer @202ms"}, h.users(2, 1), "not a barrier: the tail waits for its window")
	require.Empty(t, h.done(nil))
	require.Equal(t, []string{"write [8]"}, h.advance(202))
	require.Empty(t, h.done(nil))
	require.Equal(t, int64(-1), h.s.Durable())
}

func TestCoreSizeBoundWaitsForTheWindowAfterAFailure(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd) // maxBatch 8
	require.Equal(t, []string{"write [0 1 2 3 4 5 6 7]"}, h.users(0, 8), "no window at all: the bound is reached at once")
	require.Equal(t, []string{"owner write-failed: disk on fire"}, h.done(errWriteDisk))
	// Over the bound, but a failing store is not retried at event rate.
	require.Equal(t, []string{"arm timer @210ms"}, h.users(10, 1))
	require.Empty(t, h.users(20, 1))
	require.Equal(t, []string{"write [0 1 2 3 4 5 6 7 8 9]"}, h.advance(210))
	require.Empty(t, h.done(nil))
}

func TestCoreUntrackDrainsEverything(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	h.users(0, 1)
	require.Equal(t, []string{"cancel timer", "write+sync [0]"}, h.drain("u"))
	require.Empty(t, h.users(10, 1), "arrived during the write")
	// Seq 0 is durable but seq 1 is still queued: a drain waits for it.
	require.Equal(t, []string{"write+sync [1]", "owner durable 0"}, h.done(nil))
	require.Equal(t, []string{"flushed u durable=1", "owner durable 1"}, h.done(nil))
}

func TestCoreDrainFailureFailsTheWaiter(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	h.users(0, 1)
	h.drain("u")
	require.Equal(t, []string{"flush-failed u durable=-1: disk on fire", "owner write-failed: disk on fire"}, h.done(errWriteDisk))
	require.Equal(t, []string{"write+sync [0]"}, h.drain("u2"))
	require.Equal(t, []string{"flushed u2 durable=0", "owner durable 0"}, h.done(nil))
}

func TestCorePolicyNoneWritesNothing(t *testing.T) {
	h := newCoreHarness(t, PolicyNone)
	require.Empty(t, h.users(0, 3))
	require.Equal(t, []string{"flushed a durable=2"}, h.flush("a", -1))
	require.Empty(t, h.flush("b", 4))
	require.Equal(t, []string{"flushed b durable=4"}, h.users(10, 2))
	ds := h.ts.next(0)
	require.Equal(t, []string{"owner durable 13"}, h.commit(ds...), "a turn/end is reported")
	require.Equal(t, 0, h.s.Pending())
	require.Equal(t, []string{"flushed u durable=13"}, h.drain("u"))
}

func TestCoreSkipsDuplicatesAndRefusesGaps(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	evs, err := h.l.AppendBatch(wbUserDrafts(4), 1)
	require.NoError(t, err)
	now := h.base
	_, err = h.s.Enqueue(session.EventsOf(evs[:2]), now)
	require.NoError(t, err)
	e, err := h.s.Enqueue(session.EventsOf(evs[:3]), now)
	require.NoError(t, err)
	require.False(t, e.ArmTimer)
	require.Equal(t, int64(2), h.s.Received())

	l2, err := session.New(wbHeader("other"))
	require.NoError(t, err)
	far, err := l2.AppendBatch(wbUserDrafts(6), 1)
	require.NoError(t, err)
	_, err = h.s.Enqueue(session.EventsOf(far[4:]), now)
	var gap *seqGapError
	require.ErrorAs(t, err, &gap)
	require.Equal(t, int64(3), gap.Want)
	require.Equal(t, int64(4), gap.Got)
	require.Equal(t, int64(2), h.s.Received(), "a refused batch changes nothing")
}

func TestCoreIgnoresStaleTicks(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	h.users(0, 1)
	stale := h.gen
	h.flush("a", -1)
	require.Empty(t, h.render(h.s.Tick(stale)))
	require.Equal(t, []string{"flushed a durable=0", "owner durable 0"}, h.done(nil))
}

func TestCoreResumedSessionStartsAtItsStoredLength(t *testing.T) {
	s := newWriteBehind[string](PolicyTurnEnd, time.Second, 10, 5)
	require.Equal(t, int64(4), s.Durable())
	require.Equal(t, int64(4), s.Received())
	e := s.Flush("a", -1)
	require.Equal(t, []flushReply[string]{{W: "a", Durable: 4}}, e.Replies)
}

// TestCoreRandomWalk drives the core with random operations and checks,
// against a tiny model, that it never loses, duplicates or reorders an
// event, keeps one write in flight at most, and answers every waiter
// exactly once with a correct watermark.
func TestCoreRandomWalk(t *testing.T) {
	for seed := range 50 {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			randomWalk(t, uint64(seed))
		})
	}
}

func randomWalk(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0))
	h := newCoreHarness(t, Policy(r.IntN(2))) // TurnEnd or Strict
	var stored []int64                        // seqs "in the store"
	synced := 0                               // of them durable
	var inflight []session.Event
	writing, sync := false, false
	late := false                  // the write in flight was folded late: its failure may come before the fold's part ran
	pendingW := map[string]int64{} // waiter → target
	answered := map[string]bool{}
	nw := 0
	ts := newTurnScript()
	var ds []session.Draft
	check := func(out effects[string]) {
		if out.Promote {
			require.True(t, writing, "promote without a write in flight")
			require.Equal(t, h.write, out.WriteGen)
			switch r.IntN(3) {
			case 0: // not started
				inflight, sync = h.s.Fold(out.WriteGen, false), true
			case 1: // its store call is running: a late fold
				inflight, sync, late = h.s.Fold(out.WriteGen, true), true, true
			} // else the call had returned: too late
		}
		if out.StartWrite {
			require.False(t, writing, "two writes in flight")
			inflight, writing, sync = out.Write, true, out.Sync
			h.write = out.WriteGen
		}
		if out.ArmTimer {
			h.armed, h.at, h.gen = true, out.TimerAt.Sub(h.base), out.TimerGen
		}
		if out.CancelTimer {
			h.armed = false
		}
		for _, rep := range out.Replies {
			require.False(t, answered[rep.W], "waiter %s answered twice", rep.W)
			answered[rep.W] = true
			if rep.Err == nil {
				require.GreaterOrEqual(t, rep.Durable, pendingW[rep.W], "flushed before its target")
				require.Equal(t, int64(synced)-1, rep.Durable, "answered before it was synced")
			}
			delete(pendingW, rep.W)
		}
	}
	for step := 0; step < 400; step++ {
		switch op := r.IntN(10); {
		case op < 4: // commit a few events of the turn script
			if len(ds) == 0 {
				ds = ts.next(r.IntN(12))
			}
			k := min(len(ds), 1+r.IntN(5))
			evs, err := h.l.AppendBatch(ds[:k], 1)
			require.NoError(t, err)
			ds = ds[k:]
			out, err := h.s.Enqueue(session.EventsOf(evs), h.base.Add(h.now))
			require.NoError(t, err)
			check(out)
		case op < 6: // time passes
			h.now += time.Duration(r.IntN(150)) * time.Millisecond
			if h.armed && h.at <= h.now {
				h.armed = false
				check(h.s.Tick(h.gen))
			}
		case op < 8: // the write in flight completes
			if !writing {
				continue
			}
			var err error
			if r.IntN(3) == 0 {
				err = errWriteDisk
				stored = stored[:synced] // the store cuts back to its last sync
			} else {
				for _, e := range inflight {
					require.Equal(t, int64(len(stored)), e.Seq(), "written out of order")
					stored = append(stored, e.Seq())
				}
				if sync {
					synced = len(stored)
				}
			}
			if err != nil && late && r.IntN(2) == 0 {
				sync = false // the background batch failed, before the fold's part
			}
			inflight, writing, late = nil, false, false
			gen := h.write
			out, werr := h.s.WriteDone(gen, sync, err)
			require.NoError(t, werr)
			if out.HasDurable {
				require.True(t, sync, "durable without a sync")
				require.Equal(t, int64(synced)-1, out.Durable)
			}
			check(out)
		default: // a flush, sometimes ahead of what has arrived
			nw++
			w := fmt.Sprint("w", nw)
			upTo := int64(-1)
			if r.IntN(3) == 0 {
				upTo = h.s.Received() + int64(r.IntN(4))
			}
			target := upTo
			if target < 0 {
				target = h.s.Received()
			}
			pendingW[w] = target
			if r.IntN(4) == 0 {
				pendingW[w] = h.s.Received()
				check(h.s.Drain(w))
			} else {
				check(h.s.Flush(w, upTo))
			}
		}
	}
	// Settle: a final flush with a healthy store writes everything.
	complete := func() {
		for _, e := range inflight {
			require.Equal(t, int64(len(stored)), e.Seq())
			stored = append(stored, e.Seq())
		}
		if sync {
			synced = len(stored)
		}
		inflight, writing, late = nil, false, false
		out, err := h.s.WriteDone(h.write, sync, nil)
		require.NoError(t, err)
		check(out)
	}
	for writing {
		complete()
	}
	check(h.s.Drain("final"))
	for writing {
		complete()
	}
	require.True(t, answered["final"])
	require.Equal(t, h.l.Len(), int64(len(stored)), "every received event stored exactly once")
	require.Equal(t, len(stored), synced, "a drain syncs everything")
	for w, target := range pendingW {
		require.Greater(t, target, h.s.Received(), "waiter %s still pending though its events arrived", w)
	}
}

// heldBuffers is the capacity, in events, of every event buffer the core
// holds.
func (h *coreHarness) heldBuffers() int {
	s := h.s
	return cap(s.queue) + cap(s.spare) + cap(s.unsynced) + cap(s.inflight)
}

// A session whose turn has ended durable holds no event buffers: a
// thousand idle sessions would otherwise each keep arrays sized for their
// largest batch. Between the windows of a turn the drained buffer is
// reused.
func TestCoreIdleSessionHoldsNoBuffers(t *testing.T) {
	h := newCoreHarness(t, PolicyTurnEnd)
	h.s.maxBatch = 4096
	ds := h.ts.next(40) // 49 events, seqs 0..48
	require.Equal(t, []string{"arm timer @200ms"}, h.commit(ds[:20]...))
	require.Equal(t, []string{"write [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19]"}, h.advance(200))
	require.Empty(t, h.done(nil))
	h.now = 250 * time.Millisecond
	require.Equal(t, []string{"arm timer @450ms"}, h.commit(ds[20:40]...))
	require.Positive(t, h.heldBuffers(), "mid-turn: the written batch is kept until a barrier syncs it")
	h.now = 300 * time.Millisecond
	require.Equal(t, []string{"cancel timer", "write+sync [20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48]"},
		h.commit(ds[40:]...))
	require.Equal(t, []string{"owner durable 48"}, h.done(nil))
	require.Zero(t, h.heldBuffers(), "the turn ended durable: nothing pending, no buffer kept")
	require.Zero(t, h.s.Pending())

	// The next turn works from nothing as before.
	require.Equal(t, []string{"write+sync [49 50 51 52 53 54 55 56 57 58]"}, h.commit(h.ts.next(1)...))
	require.Equal(t, []string{"owner durable 58"}, h.done(nil))
	require.Zero(t, h.heldBuffers())
}
