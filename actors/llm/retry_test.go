package llm

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dshgo/dsh/messages"
	"github.com/stretchr/testify/require"
)

func failure(code string) messages.LlmFailure { return messages.LlmFailure{Code: code, Message: "x"} }

func TestRetryPolicyDefaults(t *testing.T) {
	d := RetryPolicy{}.WithDefaults()
	require.Equal(t, RetryNormal, d.Mode)
	require.Equal(t, 5, d.MaxRetries)
	require.Equal(t, []string{"EMPTY_RESPONSE", "RATE_LIMIT", "SERVER", "TIMEOUT", "TRANSPORT"}, d.RetryableCodes)
	require.Equal(t, 500*time.Millisecond, d.InitialDelay)
	require.Equal(t, 10*time.Second, d.MaxDelay)
	require.Equal(t, 0.1, d.JitterRatio)
	require.NoError(t, RetryPolicy{}.Validate())
	require.Equal(t, DefaultRetryableCodes(), d.RetryableCodes)

	// DefaultRetryableCodes hands out a copy.
	c := DefaultRetryableCodes()
	c[0] = "MUTATED"
	require.Equal(t, CodeEmptyResponse, DefaultRetryableCodes()[0])
}

func TestRetryPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    RetryPolicy
	}{
		{"unknown mode", RetryPolicy{Mode: 7}},
		{"negative delay", RetryPolicy{InitialDelay: -time.Second}},
		{"max below initial", RetryPolicy{InitialDelay: 20 * time.Second}},
		{"jitter above 1", RetryPolicy{JitterRatio: 1.5}},
		{"jitter NaN", RetryPolicy{JitterRatio: math.NaN()}},
		{"empty code", RetryPolicy{RetryableCodes: []string{CodeServer, ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorContains(t, tc.p.Validate(), "llm: retry policy:")
		})
	}
	require.NoError(t, RetryPolicy{Mode: RetryAlways, MaxRetries: -1, JitterRatio: -1, MaxDelay: time.Second,
		InitialDelay: time.Second}.Validate())
}

func TestRetryPolicyDecidesWhichFailuresRetry(t *testing.T) {
	normal := RetryPolicy{}
	for _, code := range DefaultRetryableCodes() {
		_, ok := normal.Decide(1, failure(code), rand.New(rand.NewPCG(1, 2)))
		require.True(t, ok, code)
	}
	for _, code := range []string{CodeAuth, CodeQuota, CodeContextWindowExceeded, CodeInvalidRequest,
		CodeMalformedResponse, CodeStreamClosed, CodeUnknown, CodeAborted, "HTTP_418"} {
		_, ok := normal.Decide(1, failure(code), nil)
		require.False(t, ok, code)
	}

	// At most MaxRetries retries: numbers 1..5 go, 6 does not.
	for retry := 1; retry <= 5; retry++ {
		_, ok := normal.Decide(retry, failure(CodeServer), nil)
		require.True(t, ok, "retry %d", retry)
	}
	_, ok := normal.Decide(6, failure(CodeServer), nil)
	require.False(t, ok)
	_, ok = RetryPolicy{MaxRetries: -1}.Decide(1, failure(CodeServer), nil)
	require.False(t, ok, "negative MaxRetries: no retries")
	_, ok = RetryPolicy{RetryableCodes: []string{CodeAuth}}.Decide(1, failure(CodeServer), nil)
	require.False(t, ok, "custom codes replace the defaults")

	// Always: every code, no limit; never ABORTED.
	always := RetryPolicy{Mode: RetryAlways}
	for _, code := range []string{CodeAuth, CodeUnknown, CodeServer} {
		_, ok := always.Decide(1000, failure(code), nil)
		require.True(t, ok, code)
	}
	_, ok = always.Decide(1, failure(CodeAborted), nil)
	require.False(t, ok)
}

func TestRetryPolicyBacksOffExponentiallyWithJitter(t *testing.T) {
	exact := RetryPolicy{JitterRatio: -1}
	var got []time.Duration
	for retry := 1; retry <= 7; retry++ {
		d, ok := exact.Decide(retry, failure(CodeRateLimit), nil)
		require.True(t, ok || retry > 5)
		if !ok {
			d, _ = RetryPolicy{Mode: RetryAlways, JitterRatio: -1}.Decide(retry, failure(CodeRateLimit), nil)
		}
		got = append(got, d)
	}
	require.Equal(t, []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second,
		8 * time.Second, 10 * time.Second, 10 * time.Second}, got)

	// A huge retry number neither overflows nor loops for long.
	d, ok := RetryPolicy{Mode: RetryAlways, JitterRatio: -1}.Decide(math.MaxInt, failure(CodeServer), nil)
	require.True(t, ok)
	require.Equal(t, 10*time.Second, d)

	// Jitter: within ±10%, capped at MaxDelay, whole milliseconds, and
	// deterministic for a seeded source.
	jittered := func(seed uint64) []time.Duration {
		rnd := rand.New(rand.NewPCG(seed, 0))
		var out []time.Duration
		p := RetryPolicy{Mode: RetryAlways}
		for retry := 1; retry <= 8; retry++ {
			d, _ := p.Decide(retry, failure(CodeServer), rnd)
			out = append(out, d)
		}
		return out
	}
	a := jittered(7)
	require.Equal(t, a, jittered(7))
	require.NotEqual(t, a, jittered(8))
	for i, d := range a {
		base := min(500*time.Millisecond<<i, 10*time.Second)
		require.GreaterOrEqual(t, d, base*9/10, "retry %d", i+1)
		require.LessOrEqual(t, d, min(base*11/10, 10*time.Second), "retry %d", i+1)
		require.Zero(t, d%time.Millisecond)
	}
}

func TestRetryPolicyHonoursTheProviderHint(t *testing.T) {
	f := messages.LlmFailure{Code: CodeRateLimit, Message: "slow down", Status: 429, ProviderRetryAfterMs: 30_000}
	d, ok := RetryPolicy{}.Decide(1, f, rand.New(rand.NewPCG(1, 1)))
	require.True(t, ok)
	require.Equal(t, 30*time.Second, d, "the hint replaces the backoff: uncapped, unjittered")

	f.ProviderRetryAfterMs = 20
	d, _ = RetryPolicy{}.Decide(4, f, nil)
	require.Equal(t, 20*time.Millisecond, d, "even when shorter than the backoff")

	f.ProviderRetryAfterMs = math.MaxInt64
	d, _ = RetryPolicy{}.Decide(1, f, nil)
	require.Positive(t, d, "no overflow")

	// The hint does not make a failure retryable.
	f = messages.LlmFailure{Code: CodeAuth, Message: "no", ProviderRetryAfterMs: 10}
	_, ok = RetryPolicy{}.Decide(1, f, nil)
	require.False(t, ok)
}

func TestRetryPolicyKeyIsCanonical(t *testing.T) {
	def := RetryPolicy{}.Key()
	require.Equal(t,
		"normal;maxRetries=5;codes=EMPTY_RESPONSE,RATE_LIMIT,SERVER,TIMEOUT,TRANSPORT;initialDelayMs=500;maxDelayMs=10000;jitterRatio=0.1",
		def)
	spelled := RetryPolicy{MaxRetries: 5, InitialDelay: 500 * time.Millisecond, MaxDelay: 10 * time.Second,
		JitterRatio: 0.1, RetryableCodes: []string{"TRANSPORT", "TIMEOUT", "SERVER", "SERVER", "RATE_LIMIT", "EMPTY_RESPONSE"}}
	require.Equal(t, def, spelled.Key())
	require.Equal(t, "always;initialDelayMs=500;maxDelayMs=10000;jitterRatio=0.1", RetryPolicy{Mode: RetryAlways}.Key())
	require.NotEqual(t, def, RetryPolicy{MaxRetries: 3}.Key())
}

func TestRetryEventData(t *testing.T) {
	e := RetryEvent{RetryID: "rt-1", Turn: 2, Step: 3, Provider: "deepseek", Retry: 1, Delay: 512 * time.Millisecond,
		Failure: messages.LlmFailure{Code: CodeServer, Message: "502", Status: 502}}
	require.Equal(t,
		`{"retryId":"rt-1","turn":2,"step":3,"provider":"deepseek","mode":"normal",`+
			`"policyKey":"`+RetryPolicy{}.Key()+`","retry":1,"maxRetries":5,"delayMs":512,`+
			`"failure":{"message":"502","code":"SERVER","status":502}}`,
		RetryPolicy{}.RetryData(e).String())

	e.PolicyKey = "custom"
	require.Equal(t,
		`{"retryId":"rt-1","turn":2,"step":3,"provider":"deepseek","mode":"always","policyKey":"custom",`+
			`"retry":1,"delayMs":512,"failure":{"message":"502","code":"SERVER","status":502}}`,
		RetryPolicy{Mode: RetryAlways}.RetryData(e).String())

	require.Equal(t, `{"retryId":"rt-1","turn":2,"step":3,"retry":1}`, RetryStartedData("rt-1", 2, 3, 1).String())
	require.Equal(t, "normal", RetryNormal.String())
	require.Equal(t, "always", RetryAlways.String())
	require.Equal(t, "RetryMode(9)", RetryMode(9).String())
}
