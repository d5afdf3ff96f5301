//go:build !race

package cluster

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/supervisor"
)

// memberRecords keeps the membership records a member logs.
type memberRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *memberRecords) Enabled(context.Context, slog.Level) bool { return true }
func (r *memberRecords) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.recs = append(r.recs, rec.Clone())
	r.mu.Unlock()
	return nil
}
func (r *memberRecords) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *memberRecords) WithGroup(string) slog.Handler      { return r }

// count returns how many info records with message msg say member from
// self.
func (r *memberRecords) count(msg, self, member string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.recs {
		if rec.Level != slog.LevelInfo || rec.Message != msg {
			continue
		}
		attrs := map[string]string{}
		rec.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		if attrs["self"] == self && attrs["member"] == member {
			n++
		}
	}
	return n
}

// A member logs, through its logger at info, each other member that
// joins the cluster and leaves it, once each, with the member's address.
func TestMemberLogsMembershipChanges(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	rec := &memberRecords{}
	ms, err := StartLocal(ctx, 2, Config{Dir: t.TempDir(), Refresh: 100 * time.Millisecond,
		Session: supervisor.Config{Logger: slog.New(rec)}})
	require.NoError(t, err)
	defer func() { require.NoError(t, CloseAll(context.WithoutCancel(ctx), ms[:1])) }()
	a, b := ms[0].Address(), ms[1].Address()
	require.Eventually(t, func() bool { return rec.count("cluster member joined", a, b) > 0 }, time.Minute, 10*time.Millisecond)
	require.NoError(t, ms[1].Close(ctx))
	require.Eventually(t, func() bool { return rec.count("cluster member left", a, b) > 0 }, time.Minute, 10*time.Millisecond)
	require.Equal(t, 1, rec.count("cluster member joined", a, b), "b joined once, as a sees it")
	require.Equal(t, 1, rec.count("cluster member left", a, b), "b left once")
	require.Zero(t, rec.count("cluster member left", a, a))
}
