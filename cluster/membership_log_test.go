//go:build !race

package cluster

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/internal/testutil"
	"github.com/dshgo/dsh/supervisor"
)

// countMembership returns how many of r's info records with message msg
// say member from self.
func countMembership(r *testutil.LogRecords, msg, self, member string) int {
	n := 0
	for _, rec := range r.AtLevel(slog.LevelInfo) {
		if rec.Message == msg && testutil.Attr(rec, "self") == self && testutil.Attr(rec, "member") == member {
			n++
		}
	}
	return n
}

// A member logs, through its logger at info, each other member that
// joins the cluster and leaves it, once each, with the member's address.
func TestMemberLogsMembershipChanges(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	rec := &testutil.LogRecords{}
	ms, err := StartLocal(ctx, 2, Config{Dir: t.TempDir(), Refresh: 100 * time.Millisecond,
		Session: supervisor.Config{Logger: slog.New(rec)}})
	require.NoError(t, err)
	defer func() { require.NoError(t, CloseAll(context.WithoutCancel(ctx), ms[:1])) }()
	a, b := ms[0].Address(), ms[1].Address()
	require.Eventually(t, func() bool { return countMembership(rec, "cluster member joined", a, b) > 0 }, time.Minute, 10*time.Millisecond)
	require.NoError(t, ms[1].Close(ctx))
	require.Eventually(t, func() bool { return countMembership(rec, "cluster member left", a, b) > 0 }, time.Minute, 10*time.Millisecond)
	require.Equal(t, 1, countMembership(rec, "cluster member joined", a, b), "b joined once, as a sees it")
	require.Equal(t, 1, countMembership(rec, "cluster member left", a, b), "b left once")
	require.Zero(t, countMembership(rec, "cluster member left", a, a))
}
