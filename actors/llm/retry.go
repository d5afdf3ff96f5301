package llm

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dshgo/dsh/messages"
)

// RetryMode selects how a RetryPolicy decides
// (docs/agent-loop.md#errors-and-retries).
type RetryMode uint8

const (
	// RetryNormal retries the retryable codes, at most MaxRetries times.
	RetryNormal RetryMode = iota
	// RetryAlways retries every failure, with no limit: backoff only.
	RetryAlways
)

// String returns the mode as the llm/retry event writes it: "normal" or
// "always".
func (m RetryMode) String() string {
	switch m {
	case RetryNormal:
		return "normal"
	case RetryAlways:
		return "always"
	}
	return "RetryMode(" + strconv.Itoa(int(m)) + ")"
}

// The defaults of RetryPolicy (docs/agent-loop.md#errors-and-retries; the
// reference's values).
const (
	DefaultMaxRetries   = 5
	DefaultInitialDelay = 500 * time.Millisecond
	DefaultMaxDelay     = 10 * time.Second
	DefaultJitterRatio  = 0.1
)

// defaultRetryableCodes is the reference's default list, sorted.
var defaultRetryableCodes = []string{CodeEmptyResponse, CodeRateLimit, CodeServer, CodeTimeout, CodeTransport}

// DefaultRetryableCodes returns the codes retried by default in normal
// mode: EMPTY_RESPONSE, RATE_LIMIT, SERVER, TIMEOUT, TRANSPORT. The slice
// is owned by the caller.
func DefaultRetryableCodes() []string { return slices.Clone(defaultRetryableCodes) }

// RetryPolicy decides whether and when a failed model call is retried
// (docs/agent-loop.md#errors-and-retries). Every field works at zero, meaning
// its default. It is a plain value, safe for concurrent use as long as nobody
// modifies RetryableCodes, which the policy does not copy: the caller must
// not modify that slice after handing the policy over.
type RetryPolicy struct {
	// Mode is RetryNormal (the default) or RetryAlways.
	Mode RetryMode
	// MaxRetries bounds the retries of one call in normal mode (the
	// retry numbered MaxRetries is the last). Default 5; negative means no
	// retries at all. Ignored in always mode.
	MaxRetries int
	// RetryableCodes lists the failure codes retried in normal mode.
	// Default (nil or empty): DefaultRetryableCodes. Ignored in always
	// mode.
	RetryableCodes []string
	// InitialDelay is the backoff before the first retry; it doubles with
	// each retry. Default 500ms.
	InitialDelay time.Duration
	// MaxDelay caps the backoff, jitter included. Default 10s. It does not
	// cap a provider's retry hint (see Decide).
	MaxDelay time.Duration
	// JitterRatio spreads each backoff uniformly over
	// [d·(1−r), d·(1+r)] so that sessions failing together do not retry
	// together. Default 0.1; negative means no jitter; at most 1.
	JitterRatio float64
}

// WithDefaults returns p with every zero field set to its default.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.MaxRetries == 0 {
		p.MaxRetries = DefaultMaxRetries
	}
	if len(p.RetryableCodes) == 0 {
		p.RetryableCodes = defaultRetryableCodes
	}
	if p.InitialDelay == 0 {
		p.InitialDelay = DefaultInitialDelay
	}
	if p.MaxDelay == 0 {
		p.MaxDelay = DefaultMaxDelay
	}
	if p.JitterRatio == 0 {
		p.JitterRatio = DefaultJitterRatio
	}
	return p
}

// Validate reports a policy that cannot be used: an unknown mode, a
// negative delay, a MaxDelay below InitialDelay (after defaults), a jitter
// ratio above 1 or not a number, or an empty code.
func (p RetryPolicy) Validate() error {
	d := p.WithDefaults()
	var errs []error
	if p.Mode != RetryNormal && p.Mode != RetryAlways {
		errs = append(errs, fmt.Errorf("llm: retry policy: unknown mode %d", p.Mode))
	}
	if p.InitialDelay < 0 || p.MaxDelay < 0 {
		errs = append(errs, fmt.Errorf("llm: retry policy: negative delay (initial %v, max %v)", p.InitialDelay, p.MaxDelay))
	} else if d.MaxDelay < d.InitialDelay {
		errs = append(errs, fmt.Errorf("llm: retry policy: max delay %v below initial delay %v", d.MaxDelay, d.InitialDelay))
	}
	if math.IsNaN(p.JitterRatio) || p.JitterRatio > 1 {
		errs = append(errs, fmt.Errorf("llm: retry policy: jitter ratio %v not at most 1", p.JitterRatio))
	}
	if slices.Contains(p.RetryableCodes, "") {
		errs = append(errs, errors.New("llm: retry policy: empty retryable code"))
	}
	return errors.Join(errs...)
}

// Retryable reports whether the policy retries failures of code at all
// (ignoring the retry count). ABORTED never is: a cancelled call must not
// come back, in either mode.
func (p RetryPolicy) Retryable(code string) bool {
	if code == CodeAborted {
		return false
	}
	if p.Mode == RetryAlways {
		return true
	}
	return slices.Contains(p.WithDefaults().RetryableCodes, code)
}

// Decide says whether failure f, which ended a call, gets retry number
// retry (1 for the first retry of the call, counted per provider and per
// policy key), and after what delay.
//
//   - normal mode: only a retryable code, and only while retry <=
//     MaxRetries; always mode: every code, with no limit. ABORTED never.
//   - The delay is the provider's hint when f carries a valid one
//     (ProviderRetryAfterMs > 0): it replaces the local backoff entirely,
//     uncapped and without jitter. A provider that says
//     "retry after 30s" is not helped by a retry after 10s; taking the
//     larger of the two, or capping the hint at MaxDelay, were the
//     alternatives, and both second-guess the server.
//   - Otherwise exponential backoff: InitialDelay·2^(retry−1), capped at
//     MaxDelay, spread by ±JitterRatio with one draw from rnd, then capped
//     at MaxDelay again.
//
// Delays are whole milliseconds, so the delayMs written to llm/retry is
// exactly the wait. rnd may be nil (the global source); pass a seeded one
// for determinism. A rand.Rand is not safe for concurrent use: the caller
// owns rnd.
func (p RetryPolicy) Decide(retry int, f messages.LlmFailure, rnd *rand.Rand) (delay time.Duration, ok bool) {
	p = p.WithDefaults()
	retry = max(retry, 1)
	if !p.Retryable(f.Code) {
		return 0, false
	}
	if p.Mode == RetryNormal && retry > p.MaxRetries {
		return 0, false
	}
	if ms := f.ProviderRetryAfterMs; ms > 0 {
		return time.Duration(min(ms, math.MaxInt64/int64(time.Millisecond))) * time.Millisecond, true
	}
	return p.backoff(retry, rnd), true
}

// backoff returns the jittered exponential delay of retry (>= 1) of a
// policy with its defaults applied.
func (p RetryPolicy) backoff(retry int, rnd *rand.Rand) time.Duration {
	d := max(p.InitialDelay, 0)
	for i := 1; i < retry && d > 0 && d < p.MaxDelay; i++ {
		d *= 2
	}
	d = min(d, p.MaxDelay)
	if p.JitterRatio > 0 && d > 0 {
		var u float64
		if rnd != nil {
			u = rnd.Float64()
		} else {
			u = rand.Float64()
		}
		d += time.Duration(float64(d) * p.JitterRatio * (2*u - 1))
		d = min(max(d, 0), p.MaxDelay)
	}
	return d.Round(time.Millisecond)
}

// Key returns the policy's canonical key: its mode and its resolved
// parameters, in one string that two equal policies share whatever their
// spelling (defaults applied, codes sorted and deduplicated). The
// llm/retry event carries it as policyKey, and retries are counted per
// provider and per key, so that a policy change restarts the
// count.
func (p RetryPolicy) Key() string {
	p = p.WithDefaults()
	var b strings.Builder
	b.WriteString(p.Mode.String())
	if p.Mode == RetryNormal {
		codes := slices.Clone(p.RetryableCodes)
		slices.Sort(codes)
		codes = slices.Compact(codes)
		fmt.Fprintf(&b, ";maxRetries=%d;codes=%s", max(p.MaxRetries, 0), strings.Join(codes, ","))
	}
	fmt.Fprintf(&b, ";initialDelayMs=%d;maxDelayMs=%d;jitterRatio=%s", p.InitialDelay.Milliseconds(),
		p.MaxDelay.Milliseconds(), strconv.FormatFloat(max(p.JitterRatio, 0), 'g', -1, 64))
	return b.String()
}

// RetryEvent is what an llm/retry event records besides the policy: the
// retry about to be waited for.
type RetryEvent struct {
	// RetryID identifies this retry; llm/retry-started repeats it.
	RetryID string
	// Turn and Step locate the failed call; a retry stays in its step.
	Turn, Step int64
	// Provider is the provider of the failed call.
	Provider string
	// PolicyKey is the key retries are counted under. Default: the
	// policy's Key.
	PolicyKey string
	// Retry is the retry number (1 for the first).
	Retry int
	// Delay is the wait before the retry, as Decide returned it.
	Delay time.Duration
	// Failure is the failure that caused the retry.
	Failure messages.LlmFailure
}

// RetryData returns the data of the llm/retry event for e under p
// (docs/session-log.md#event-catalogue): {retryId, turn, step, provider,
// mode, policyKey, retry, maxRetries, delayMs, failure}, maxRetries only in
// normal mode.
func (p RetryPolicy) RetryData(e RetryEvent) messages.JSON {
	p = p.WithDefaults()
	key := e.PolicyKey
	if key == "" {
		key = p.Key()
	}
	var o messages.ObjectBuilder
	o.String("retryId", e.RetryID).Int("turn", e.Turn).Int("step", e.Step).String("provider", e.Provider).
		String("mode", p.Mode.String()).String("policyKey", key).Int("retry", int64(e.Retry))
	if p.Mode == RetryNormal {
		o.Int("maxRetries", int64(max(p.MaxRetries, 0)))
	}
	o.Int("delayMs", e.Delay.Milliseconds()).Raw("failure", e.Failure.JSON())
	return o.Build()
}

// RetryStartedData returns the data of the llm/retry-started event
// (docs/session-log.md#event-catalogue): {retryId, turn, step, retry},
// written after the wait and before the retried call.
func RetryStartedData(retryID string, turn, step int64, retry int) messages.JSON {
	var o messages.ObjectBuilder
	return o.String("retryId", retryID).Int("turn", turn).Int("step", step).Int("retry", int64(retry)).Build()
}
