package supervisor

import (
	"context"
	"iter"
	"sync/atomic"
	"time"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/telemetry"
)

// limitedProvider bounds the model calls open at once across the host
// (Config.MaxConcurrentModelCalls): a call beyond the bound waits for a
// slot (a queue, not an error) until its context is done. A slot is held
// from the first pull of the stream until the iterator returns.
type limitedProvider struct {
	llm.Provider
	slots   chan struct{}
	waiting atomic.Int64
	open    atomic.Int64
	metrics *telemetry.Metrics // nil: the queue wait is not recorded
}

func newLimitedProvider(p llm.Provider, n int) *limitedProvider {
	return &limitedProvider{Provider: p, slots: make(chan struct{}, n)}
}

// Model forwards the wrapped provider's model, if it has one.
func (l *limitedProvider) Model() string {
	if m, ok := l.Provider.(interface{ Model() string }); ok {
		return m.Model()
	}
	return ""
}

func (l *limitedProvider) Stream(ctx context.Context, req llm.Request) iter.Seq2[messages.StreamChunk, error] {
	return func(yield func(messages.StreamChunk, error) bool) {
		l.waiting.Add(1)
		var since time.Time
		if l.metrics != nil {
			since = time.Now()
		}
		select {
		case l.slots <- struct{}{}:
			l.waiting.Add(-1)
			if l.metrics != nil {
				l.metrics.QueueWait(time.Since(since))
			}
		case <-ctx.Done():
			l.waiting.Add(-1)
			yield(messages.StreamChunk{}, context.Cause(ctx))
			return
		}
		l.open.Add(1)
		defer func() {
			l.open.Add(-1)
			<-l.slots
		}()
		for c, err := range l.Provider.Stream(ctx, req) {
			if !yield(c, err) {
				return
			}
		}
	}
}

// modelCalls reports the model calls open now and those queued for a slot
// (both 0 when Config.MaxConcurrentModelCalls is 0: calls are not
// counted then).
func (h *Host) modelCalls() (open, queued int64) {
	if h.limit == nil {
		return 0, 0
	}
	return h.limit.open.Load(), h.limit.waiting.Load()
}
