package synthetic

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/messages"
)

// rng is the per-call random source: a PCG held by value, so that seeding
// one per call allocates nothing (rand.New would box it). It is not safe
// for concurrent use; every call owns its own.
type rng struct{ pcg rand.PCG }

func (r *rng) seed(h uint64) { r.pcg.Seed(h, h^0xda942042e4dd58b5) }

// float returns a uniform float64 in [0, 1).
func (r *rng) float() float64 { return float64(r.pcg.Uint64()>>11) / (1 << 53) }

// intn returns a uniform int in [0, n); n > 0. The modulo bias is below
// n/2^64, far under anything a rate test can see.
func (r *rng) intn(n int) int { return int(r.pcg.Uint64() % uint64(n)) }

// count draws a block length around mean: uniform in [mean/2, mean*3/2],
// at least 1.
func (r *rng) count(mean int) int {
	lo := max(1, mean/2)
	hi := max(lo, mean*3/2)
	return lo + r.intn(hi-lo+1)
}

// fill fills b with random bytes.
func (r *rng) fill(b []byte) {
	for i := range b {
		b[i] = byte(r.pcg.Uint64())
	}
}

// FNV-1a, 64 bits, inlined so hashing a request allocates nothing
// (hash/fnv's Write takes a []byte; a string would be copied).
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	// A terminator, so ("ab","c") and ("a","bc") differ.
	h ^= 0xff
	h *= fnvPrime
	return h
}

func fnvU64(h, v uint64) uint64 {
	for range 8 {
		h ^= v & 0xff
		h *= fnvPrime
		v >>= 8
	}
	return h
}

// pacingGranularity is the shortest wait the pacer takes between deltas:
// a delta due sooner than that is sent at once, and a later wait catches up,
// because every due time is computed from the start of the call, not from
// the previous delta. Without it, 10,000 tokens/s would cost a timer per
// delta. The first delta and the tail always wait for their exact time.
const pacingGranularity = time.Millisecond

// pacer holds a call to its schedule: delta k is due at
// start + FirstTokenLatency + k/TokensPerSecond, the tail after n deltas
// at start + FirstTokenLatency + n/TokensPerSecond. Its timer is created on
// the first wait and reused. Not safe for concurrent use.
type pacer struct {
	on    bool // any latency configured; off means no clock reads at all
	start time.Time
	ftl   time.Duration
	tps   float64
	done  <-chan struct{}
	timer *time.Timer
}

func (p *pacer) init(c Config, done <-chan struct{}) {
	p.ftl, p.tps, p.done = c.FirstTokenLatency, c.TokensPerSecond, done
	p.on = p.ftl > 0 || p.tps > 0
	if p.on {
		p.start = time.Now()
	}
}

// stop releases the timer.
func (p *pacer) stop() {
	if p.timer != nil {
		p.timer.Stop()
	}
}

func (p *pacer) due(k int) time.Time {
	d := p.ftl
	if p.tps > 0 {
		d += time.Duration(float64(k) * float64(time.Second) / p.tps)
	}
	return p.start.Add(d)
}

// waitFirst waits for the first-token time. It returns false if the call
// was cancelled first.
func (p *pacer) waitFirst() bool { return p.waitToken(0) }

// waitToken waits until delta k is due (see pacingGranularity). It returns
// false if the call was cancelled first.
func (p *pacer) waitToken(k int) bool {
	if !p.on {
		return true
	}
	d := time.Until(p.due(k))
	if d <= 0 || (k > 0 && d < pacingGranularity) {
		return true
	}
	return p.sleep(d)
}

// waitTail waits until the tail after n deltas is due.
func (p *pacer) waitTail(n int) bool {
	if !p.on {
		return true
	}
	if d := time.Until(p.due(n)); d > 0 {
		return p.sleep(d)
	}
	return true
}

func (p *pacer) sleep(d time.Duration) bool {
	if p.timer == nil {
		p.timer = time.NewTimer(d)
	} else {
		p.timer.Reset(d) // Go 1.23+ timers: no stale value to drain
	}
	select {
	case <-p.timer.C:
		return true
	case <-p.done:
		return false
	}
}

// emitter sends the chunks of one call and watches for cancellation. Not
// safe for concurrent use.
type emitter struct {
	ctx    context.Context
	done   <-chan struct{}
	yield  func(messages.StreamChunk, error) bool
	pace   pacer
	tokens int // deltas sent
}

// checkCancel reports whether the call may go on; when it was cancelled it
// yields the ABORTED failure and returns false.
func (e *emitter) checkCancel() bool {
	select {
	case <-e.done:
		e.abort()
		return false
	default:
		return true
	}
}

// send yields c unless the call was cancelled. It returns false when the
// stream must stop (cancelled, or the consumer stopped iterating).
func (e *emitter) send(c messages.StreamChunk) bool {
	return e.checkCancel() && e.yield(c, nil)
}

// due waits until the next delta is due. It returns false (after yielding
// the ABORTED failure) if the call was cancelled first.
func (e *emitter) due() bool {
	if !e.pace.waitToken(e.tokens) {
		e.abort()
		return false
	}
	return true
}

// token sends the next delta, c; due must have returned true before.
func (e *emitter) token(c messages.StreamChunk) bool {
	e.tokens++
	return e.send(c)
}

// abort yields the failure of a cancelled call. The runtime maps a
// cancelled call to an aborted finish whatever the provider says; the code
// ABORTED says it too for a consumer reading the provider directly.
func (e *emitter) abort() {
	e.yield(messages.StreamChunk{}, messages.LlmFailure{
		Message: "synthetic: call cancelled: " + context.Cause(e.ctx).Error(),
		Code:    llm.CodeAborted,
	})
}
