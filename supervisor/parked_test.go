package supervisor

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

// What the host keeps of a passivated session gives back the counters it
// had, as a non-resident session's Stats, in a few bytes.
func TestParkedStatsRoundTrip(t *testing.T) {
	usage := func(in, out, reason, cr, cw int64) messages.TokenUsage {
		return messages.TokenUsage{InputTokens: in, OutputTokens: out, ReasoningTokens: messages.Some(reason),
			CacheReadTokens: messages.Some(cr), CacheWriteTokens: messages.Some(cw)}
	}
	for _, st := range []Stats{
		{},
		{Events: 11, Chunks: 4, Turns: 1, Usage: usage(12, 4, 0, 0, 0)},
		{Events: 1 << 40, Chunks: 1<<40 - 1, Turns: 3_000_000, Usage: usage(math.MaxInt64, 7, 8, 9, 10),
			WriteFailures: 5, WriteRetries: 4},
		{Events: 3, Usage: usage(-1, math.MinInt64, 0, 0, 0)}, // never logged, but kept exactly
	} {
		resident := st
		resident.Resident, resident.Durable, resident.ResidentBytes = true, 17, sessionOverheadBytes
		want := st
		want.Durable = -1
		want.Usage = usage(st.Usage.InputTokens, st.Usage.OutputTokens, st.Usage.ReasoningTokens.Or(0),
			st.Usage.CacheReadTokens.Or(0), st.Usage.CacheWriteTokens.Or(0))
		require.Equal(t, want, packStats(resident).stats())
	}
	short := packStats(Stats{Events: 11, Chunks: 4, Turns: 1, Usage: usage(1200, 400, 0, 0, 0)})
	require.LessOrEqual(t, len(short), 16, "a short session's counters take a few bytes")
}
