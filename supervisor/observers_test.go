package supervisor

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/telemetry"
)

// recordingObserver records, per Open, the session id, the length of the
// past it was given and the seqs it was then called with.
type recordingObserver struct {
	mu    sync.Mutex
	opens []*observed
}

type observed struct {
	id   session.SessionID
	past int
	seqs []int64 // written by the session actor only; read after WaitIdle
}

func (r *recordingObserver) Open(id session.SessionID, past session.Events) session.Observer {
	o := &observed{id: id, past: past.Len()}
	r.mu.Lock()
	r.opens = append(r.opens, o)
	r.mu.Unlock()
	return func(ev session.Event) error {
		o.seqs = append(o.seqs, ev.Seq())
		return nil
	}
}

func (r *recordingObserver) snapshot() []*observed {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*observed(nil), r.opens...)
}

// Config.Observers: each observer is opened once per residency of a
// session, with its id and the events it already holds, and is then
// called with every event the session commits, in order, none twice and
// none missed; a session made resident again (after an eviction) is
// opened again with its whole past. An observer that returns nil for a
// session is left out of it.
func TestObserversSeeEveryCommittedEventOnce(t *testing.T) {
	ctx := testCtx(t)
	rec := &recordingObserver{}
	var skipped int
	var skipMu sync.Mutex
	none := telemetry.ObserverFunc(func(session.SessionID, session.Events) session.Observer {
		skipMu.Lock()
		skipped++
		skipMu.Unlock()
		return nil
	})
	h := openHost(t, Config{Dir: t.TempDir(), ManualResume: true, Observers: []telemetry.Observer{rec, none}})
	defer h.Close(ctx)
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "one")))
	require.NoError(t, h.WaitIdle(ctx, id))

	opens := rec.snapshot()
	require.Len(t, opens, 1)
	require.Equal(t, id, opens[0].id)
	first, err := h.Events(ctx, id, int64(opens[0].past))
	require.NoError(t, err)
	require.Equal(t, seqsOf(first), opens[0].seqs)
	require.NotEmpty(t, opens[0].seqs)

	require.NoError(t, h.Evict(ctx, id))
	require.NoError(t, h.Resume(ctx, id))
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "two")))
	require.NoError(t, h.WaitIdle(ctx, id))
	opens = rec.snapshot()
	require.Len(t, opens, 2)
	all, err := h.Events(ctx, id, 0)
	require.NoError(t, err)
	require.Equal(t, len(all)-len(opens[1].seqs), opens[1].past, "the second residency's past is the log before it")
	require.Equal(t, seqsOf(all)[opens[1].past:], opens[1].seqs)
	skipMu.Lock()
	require.Equal(t, 2, skipped)
	skipMu.Unlock()
}

func seqsOf(evs []session.Event) []int64 {
	var out []int64
	for _, ev := range evs {
		out = append(out, ev.Seq())
	}
	return out
}
