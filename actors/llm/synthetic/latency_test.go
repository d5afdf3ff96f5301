package synthetic

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/messages"
)

// timed is a chunk and the (fake) time it arrived, relative to the call.
type timed struct {
	chunk messages.StreamChunk
	at    time.Duration
}

func collectTimed(t *testing.T, p *Provider, ctx context.Context, req llm.Request) ([]timed, error) {
	start := time.Now()
	var out []timed
	for c, err := range p.Stream(ctx, req) {
		if err != nil {
			return out, err
		}
		out = append(out, timed{c, time.Since(start)})
	}
	return out, nil
}

func TestLatencySchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ftl, tps = 2 * time.Second, 10.0
		p := newProvider(t, Config{Seed: 4, TextChunks: 20, ReasoningChunks: 6, ReasoningRate: 1,
			FirstTokenLatency: ftl, TokensPerSecond: tps})
		got, err := collectTimed(t, p, context.Background(), request(t, "s", "go"))
		require.NoError(t, err)
		k := 0
		for _, c := range got {
			switch {
			case c.chunk.IsTokenDelta():
				// Delta k is due at ftl + k/tps, exactly: every wait here
				// is longer than the pacing granularity.
				require.Equal(t, ftl+time.Duration(k)*100*time.Millisecond, c.at, "delta %d", k)
				k++
			case c.chunk.Type() == messages.ChunkBlockStart:
				require.Equal(t, ftl+time.Duration(k)*100*time.Millisecond, c.at, "a block opens with its first delta")
			default:
				// The tail: N tokens take N/tps after the first-token latency.
				require.Equal(t, ftl+time.Duration(k)*100*time.Millisecond, c.at, "tail %s", c.chunk.Type())
			}
		}
		require.Greater(t, k, 10)
	})
}

func TestLatencyFastStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 5,000 tokens/s is 200µs per token, under the pacing granularity:
		// deltas come in bursts, but the first one and the end keep their
		// exact times and no delta is ever early by more than the
		// granularity.
		const ftl, tps = 300 * time.Millisecond, 5000.0
		p := newProvider(t, Config{Seed: 4, TextChunks: 400, FirstTokenLatency: ftl, TokensPerSecond: tps})
		got, err := collectTimed(t, p, context.Background(), request(t, "s", "go"))
		require.NoError(t, err)
		k := 0
		for i, c := range got {
			if !c.chunk.IsTokenDelta() {
				continue
			}
			due := ftl + time.Duration(float64(k)*float64(time.Second)/tps)
			if k == 0 {
				require.Equal(t, ftl, c.at)
			}
			require.LessOrEqual(t, c.at, due, "chunk %d never late", i)
			require.Greater(t, c.at, due-pacingGranularity, "chunk %d not early by a granularity", i)
			k++
		}
		end := got[len(got)-1]
		require.Equal(t, messages.ChunkFinish, end.chunk.Type())
		require.Equal(t, ftl+time.Duration(float64(k)*float64(time.Second)/tps), end.at)
	})
}

func TestLatencyFailureArrivesAfterFirstTokenLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProvider(t, Config{FirstTokenLatency: time.Second, FailureRate: 1, Failures: FailureMix{Server: 1}})
		got, err := collectTimed(t, p, context.Background(), request(t, "s", "go"))
		require.Empty(t, got)
		f, ok := llm.Failure(err)
		require.True(t, ok)
		require.Equal(t, llm.CodeServer, f.Code)
	})
}

func TestCancelWhileWaiting(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      Config
		cancelAt time.Duration
		before   int // chunks before the cancel
	}{
		{"first token", Config{FirstTokenLatency: 10 * time.Second}, time.Second, 0},
		{"between tokens", Config{TokensPerSecond: 1, TextChunks: 10}, 2500 * time.Millisecond, 4}, // block-start + deltas at 0s, 1s, 2s
		{"rate limit", Config{FirstTokenLatency: 10 * time.Second, FailureRate: 1, Failures: FailureMix{RateLimit: 1}}, time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newProvider(t, tc.cfg)
				ctx, cancel := context.WithCancelCause(context.Background())
				defer cancel(nil)
				// The cancel is a timer of the bubble: it fires when the
				// fake clock reaches cancelAt, which it does only once the
				// stream is blocked in its own timer.
				start := time.Now()
				time.AfterFunc(tc.cancelAt, func() { cancel(errors.New("user")) })
				got, err := collectTimed(t, p, ctx, request(t, "s", "go"))
				require.Equal(t, tc.cancelAt, time.Since(start), "the stream stops at the cancel")
				require.Len(t, got, tc.before)
				f, ok := llm.Failure(err)
				require.True(t, ok, "%v", err)
				require.Equal(t, llm.CodeAborted, f.Code)
				require.Contains(t, f.Message, "user")
			})
		})
	}
}
