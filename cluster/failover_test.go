//go:build !race

package cluster

import (
	"context"
	"errors"
	"iter"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/supervisor"
)

// Three members on 127.0.0.1 share a directory. Sessions spread over all
// three; one member is killed mid-turn (its writes stop, its locks drop,
// it vanishes from the network without leaving). Its sessions reactivate
// on the survivors from the shared directory: each log is repaired (the
// interrupted turn closed) and valid, every event that was acknowledged
// durable before the kill is there unchanged, and the next turn
// completes. The other members' sessions finish their turn untouched.
func TestClusterFailoverAfterMemberKilledMidTurn(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	// Turns of 55 to 165 deltas. The victim's model holds its turn-2
	// streams after a few deltas, for as long as the test wants: the kill
	// lands mid-turn however slow the machine.
	victim := 2
	held := &heldModel{}
	tc := newCluster(t, 3, synthetic.Config{Seed: 7, TextChunks: 100, ReasoningChunks: 10, TokensPerSecond: 1000})
	tc.wrap = func(i int, p *synthetic.Provider) llm.Provider {
		if i != victim {
			return p
		}
		held.Provider = p
		return held
	}
	tc.start(seq(0, 3)...)
	tc.waitMembers(3)
	m0 := tc.members[0]
	by := tc.spread(ctx, m0, 3)
	vaddr := tc.members[victim].Address()
	all := sessionsOf(by)

	// Turn 1 everywhere, acknowledged durable; turn 2 sent through
	// another member, and acknowledged durable mid-turn on the victim.
	turn(t, ctx, m0, m0, all, "first")
	held.arm(30)
	for _, id := range all {
		require.NoError(t, tc.members[1].Followup(ctx, id, userMsg(t, "second")))
	}
	acked := ackMidTurn(t, ctx, m0, by[vaddr])

	// A subscriber on another member watches each victim session live.
	watches := map[session.SessionID]*watch{}
	for _, id := range by[vaddr] {
		sub, err := m0.Subscribe(ctx, id, 0)
		require.NoError(t, err)
		watches[id] = startWatch(sub)
	}
	// Let the victim stream a little more, and the subscribers catch up
	// with it.
	held.raise(40)
	require.Eventually(t, func() bool {
		for id, w := range watches {
			if w.len() <= len(acked[id]) {
				return false
			}
		}
		return true
	}, time.Minute, 10*time.Millisecond)

	tc.kill(victim)

	// The survivors take the victim's sessions over.
	requireRecovered(t, ctx, m0, acked, []string{m0.Address(), tc.members[1].Address()})
	// The other sessions finished turn 2 normally.
	for addr, ids := range by {
		if addr == vaddr {
			continue
		}
		for _, id := range ids {
			require.NoError(t, m0.WaitIdle(ctx, id))
			es, err := m0.Events(ctx, id, 0)
			require.NoError(t, err)
			require.Equal(t, []session.TurnEndKind{session.EndCompleted, session.EndCompleted}, turnEnds(es))
		}
	}

	// The next turn completes everywhere, through either survivor.
	for i, id := range all {
		require.NoError(t, tc.members[i%2].Followup(ctx, id, userMsg(t, "third")))
	}
	for _, id := range all {
		require.NoError(t, m0.WaitIdle(ctx, id))
		es, err := tc.members[1].Events(ctx, id, 0)
		require.NoError(t, err)
		ends := turnEnds(es)
		require.Len(t, ends, 3)
		require.Equal(t, session.EndCompleted, ends[2], "turn 3 of %s", id)
	}
	// And every log in the shared directory is valid and balanced.
	for _, id := range all {
		tc.logOnDisk(id)
	}

	// Each subscriber either followed its session to the survivor and saw
	// exactly the log (turn 3 included), or was told its view diverged:
	// it had received events the dead member never made durable.
	for id, w := range watches {
		final, err := m0.Events(ctx, id, 0)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return w.ended() || len(turnEnds(w.events())) == 3 }, time.Minute, 10*time.Millisecond)
		w.sub.Close()
		got := w.events()
		for i, ev := range got {
			require.EqualValues(t, i, ev.Seq(), "no gap, no repeat")
		}
		same := len(got) <= len(final)
		for i := 0; same && i < len(got); i++ {
			same = got[i].Type() == final[i].Type() && got[i].Time() == final[i].Time()
		}
		if errors.Is(w.sub.Err(), ErrDiverged) {
			require.False(t, same, "ErrDiverged only when a received event is not in the log")
			t.Logf("%s: subscriber diverged after %d events (log has %d)", id, len(got), len(final))
			continue
		}
		require.NoError(t, w.sub.Err())
		require.True(t, same, "what the subscriber saw is the log")
		require.Len(t, turnEnds(got), 3)
	}
}

// heldModel streams like its synthetic model until armed; then each call
// (each call only picks, when set) yields at most limit chunks until the
// limit is raised, and ends when its context does (its turn disposed when
// its member goes): a turn mid-stream for as long as the test wants.
type heldModel struct {
	*synthetic.Provider
	only   func(llm.Request) bool
	mu     sync.Mutex
	armed  bool
	limit  int
	raised chan struct{} // closed when limit is raised
}

func (h *heldModel) arm(limit int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed, h.limit, h.raised = true, limit, make(chan struct{})
}

func (h *heldModel) raise(limit int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.limit = limit
	close(h.raised)
	h.raised = make(chan struct{})
}

// allowed waits until chunk n (from 0) of a call may go; false when ctx
// ends first.
func (h *heldModel) allowed(ctx context.Context, n int) bool {
	for {
		h.mu.Lock()
		ok, raised := n < h.limit, h.raised
		h.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-raised:
		case <-ctx.Done():
			return false
		}
	}
}

func (h *heldModel) Stream(ctx context.Context, req llm.Request) iter.Seq2[messages.StreamChunk, error] {
	h.mu.Lock()
	armed := h.armed
	h.mu.Unlock()
	inner := h.Provider.Stream(ctx, req)
	if !armed || h.only != nil && !h.only(req) {
		return inner
	}
	return func(yield func(messages.StreamChunk, error) bool) {
		n := 0
		for c, err := range inner {
			if !h.allowed(ctx, n) {
				return
			}
			n++
			if !yield(c, err) {
				return
			}
		}
	}
}

// answering says whether req is a turn's call (not a title's or a
// compaction's) answering the user message text.
func answering(req llm.Request, text string) bool {
	for i := req.NumMessages() - 1; i >= 0 && req.Purpose() == ""; i-- {
		if m := req.Message(i); m.Role() == messages.RoleUser {
			return m.NumBlocks() == 1 && m.Block(0).Text() == text
		}
	}
	return false
}

// watch collects what a subscription delivers.
type watch struct {
	sub  supervisor.Subscription
	mu   sync.Mutex
	got  []session.Event
	done bool
}

func startWatch(sub supervisor.Subscription) *watch {
	w := &watch{sub: sub}
	go func() {
		for ev := range sub.Events() {
			w.mu.Lock()
			w.got = append(w.got, ev)
			w.mu.Unlock()
		}
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	}()
	return w
}

func (w *watch) len() int { w.mu.Lock(); defer w.mu.Unlock(); return len(w.got) }

func (w *watch) ended() bool { w.mu.Lock(); defer w.mu.Unlock(); return w.done }

func (w *watch) events() []session.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.got)
}

// firstTurnLen is the number of events up to the first turn/end.
func firstTurnLen(es []session.Event) int64 {
	for i, ev := range es {
		if ev.Type() == session.TypeTurnEnd {
			return int64(i + 1)
		}
	}
	return int64(len(es))
}
