package synthetic

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/messages"
)

func TestConfigDefaults(t *testing.T) {
	p := newProvider(t, Config{})
	c := p.Config()
	require.Equal(t, "synthetic", p.Name())
	require.Equal(t, "synthetic-1", p.Model())
	require.Equal(t, 200, c.TextChunks)
	require.Equal(t, 50, c.ReasoningChunks)
	require.Equal(t, 4, c.ChunkSize)
	require.Equal(t, 1, c.MaxToolSteps)
	require.Equal(t, 1, c.MaxToolCalls)
	require.Equal(t, time.Second, c.RetryAfter)
	require.Equal(t, FailureMix{RateLimit: 1, Server: 1, StreamCut: 1}, c.Failures)

	// The zero config streams plain text and nothing else.
	r := collect(t, p, context.Background(), request(t, "s", "hello"))
	require.NoError(t, r.err)
	require.NoError(t, checkGrammar(r))
	require.False(t, r.has(messages.BlockReasoning))
	require.False(t, r.has(messages.BlockToolCall))
	n := r.deltas(messages.ChunkTextDelta)
	require.GreaterOrEqual(t, n, 100)
	require.LessOrEqual(t, n, 300)
	reason, ok := r.finish()
	require.True(t, ok)
	require.Equal(t, messages.FinishStop, reason.Kind)
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"negative text chunks", Config{TextChunks: -1}, "TextChunks"},
		{"negative reasoning chunks", Config{ReasoningChunks: -1}, "ReasoningChunks"},
		{"chunk size too big", Config{ChunkSize: maxChunkSize + 1}, "ChunkSize"},
		{"reasoning rate above 1", Config{ReasoningRate: 1.5}, "ReasoningRate"},
		{"tool rate NaN", Config{ToolCallRate: math.NaN()}, "ToolCallRate"},
		{"failure rate negative", Config{FailureRate: -0.1}, "FailureRate"},
		{"negative weight", Config{Failures: FailureMix{Server: -1}}, "Server"},
		{"infinite weight", Config{Failures: FailureMix{StreamCut: math.Inf(1)}}, "StreamCut"},
		{"negative latency", Config{FirstTokenLatency: -time.Second}, "FirstTokenLatency"},
		{"infinite speed", Config{TokensPerSecond: math.Inf(1)}, "TokensPerSecond"},
		{"negative retry-after", Config{RetryAfter: -time.Second}, "RetryAfter"},
		{"too many tool calls", Config{MaxToolCalls: 2000}, "MaxToolCalls"},
		{"blocks too big", Config{TextChunks: 1 << 20, ChunkSize: 4096}, "exceed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			require.ErrorContains(t, err, tc.want)
			_, err = New(tc.cfg)
			require.ErrorContains(t, err, tc.want)
		})
	}
	require.NoError(t, Config{ReasoningRate: 1, ToolCallRate: 1, FailureRate: 1, TokensPerSecond: 1e6}.Validate())
}

func mixedConfig(seed int64) Config {
	return Config{Seed: seed, TextChunks: 30, ReasoningChunks: 10, ReasoningRate: 0.5, ToolCallRate: 0.5, MaxToolCalls: 3}
}

func TestDeterministic(t *testing.T) {
	req := request(t, "session-1", "write something")
	a := collect(t, newProvider(t, mixedConfig(7)), context.Background(), req)
	b := collect(t, newProvider(t, mixedConfig(7)), context.Background(), req)
	require.NoError(t, a.err)
	require.Equal(t, a.texts(), b.texts(), "same seed, same request")

	c := collect(t, newProvider(t, mixedConfig(8)), context.Background(), req)
	require.NotEqual(t, a.texts(), c.texts(), "another seed")

	// Ids are not part of the request's identity: the same history with
	// freshly minted ids streams the same chunks.
	again := request(t, "session-1", "write something")
	require.NotEqual(t, req.Message(0).ID(), again.Message(0).ID())
	d := collect(t, newProvider(t, mixedConfig(7)), context.Background(), again)
	require.Equal(t, a.texts(), d.texts(), "same history, new ids")

	other := collect(t, newProvider(t, mixedConfig(7)), context.Background(), request(t, "session-2", "write something"))
	require.NotEqual(t, a.texts(), other.texts(), "another session")
}

func TestDeterministicUnderConcurrency(t *testing.T) {
	p := newProvider(t, mixedConfig(3))
	reqs := make([]llm.Request, 32)
	want := make([][]string, len(reqs))
	for i := range reqs {
		reqs[i] = request(t, fmt.Sprintf("s%d", i), "go")
		want[i] = collect(t, newProvider(t, mixedConfig(3)), context.Background(), reqs[i]).texts()
	}
	got := make([][]string, len(reqs))
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() {
			var texts []string
			for c, err := range p.Stream(context.Background(), reqs[i]) {
				if err != nil {
					return
				}
				texts = append(texts, c.JSON().String())
			}
			got[i] = texts
		})
	}
	wg.Wait()
	require.Equal(t, want, got)
}

func TestGrammar(t *testing.T) {
	for _, size := range []int{1, 3, 4, 7, 64} {
		for seed := range int64(60) {
			cfg := mixedConfig(seed)
			cfg.ChunkSize = size
			p := newProvider(t, cfg)
			r := collect(t, p, context.Background(), request(t, fmt.Sprintf("s%d", seed), "go"))
			require.NoError(t, r.err)
			require.NoError(t, checkGrammar(r), "seed %d size %d: %v", seed, size, r.texts())
		}
	}
}

func TestGrammarAfterToolResult(t *testing.T) {
	// Full turns: user, then tool steps until the budget is spent, then text.
	for seed := range int64(40) {
		p := newProvider(t, Config{Seed: seed, TextChunks: 10, ToolCallRate: 1, MaxToolSteps: 3, MaxToolCalls: 2})
		history := []messages.Message{userMsg(t, "task")}
		steps := 0
		for {
			req := llm.NewRequest(testConfig, "", history, nil).WithSession("turns")
			r := collect(t, p, context.Background(), req)
			require.NoError(t, r.err)
			require.NoError(t, checkGrammar(r))
			steps++
			reason, _ := r.finish()
			if reason.Kind == messages.FinishStop {
				break
			}
			require.Equal(t, messages.FinishToolCalls, reason.Kind)
			var blocks []messages.ContentBlock
			for _, c := range r.chunks {
				if c.Type() == messages.ChunkBlockEnd {
					blocks = append(blocks, c.Block())
				}
			}
			a, err := messages.NewAssistantMessage(blocks, messages.ModelSource{Provider: "synthetic", Model: "synthetic-1"})
			require.NoError(t, err)
			history = append(history, a)
			for _, b := range blocks {
				history = append(history, messages.NewToolResultMessage(b.ID(), []messages.ContentBlock{messages.TextBlock("ok")}, messages.ToolSucceeded))
			}
			history = append(history, pluginMsg(t, "runtime context"))
		}
		require.Equal(t, 4, steps, "three tool steps, then text")
	}
}

func TestRates(t *testing.T) {
	const n = 2000
	p := newProvider(t, Config{Seed: 42, TextChunks: 40, ReasoningRate: 0.3, ToolCallRate: 0.4})
	var reasoning, tools, textDeltas, texts int
	for i := range n {
		r := collect(t, p, context.Background(), request(t, fmt.Sprintf("rate-%d", i), "go"))
		require.NoError(t, r.err)
		if r.has(messages.BlockReasoning) {
			reasoning++
		}
		if r.has(messages.BlockToolCall) {
			tools++
		} else {
			texts++
			textDeltas += r.deltas(messages.ChunkTextDelta)
		}
	}
	require.InDelta(t, 0.3, float64(reasoning)/n, 0.04)
	require.InDelta(t, 0.4, float64(tools)/n, 0.04)
	require.InDelta(t, 40, float64(textDeltas)/float64(texts), 2)

	// Over many seeds, for one request.
	reasoning = 0
	for seed := range int64(n) {
		p := newProvider(t, Config{Seed: seed, TextChunks: 4, ReasoningRate: 0.7})
		if collect(t, p, context.Background(), request(t, "fixed", "go")).has(messages.BlockReasoning) {
			reasoning++
		}
	}
	require.InDelta(t, 0.7, float64(reasoning)/n, 0.04)
}

func TestToolBudget(t *testing.T) {
	p := newProvider(t, Config{Seed: 1, TextChunks: 5, ToolCallRate: 1})
	user := userMsg(t, "task")
	call := toolCallMsg(t, "call_1")
	res := messages.NewToolResultMessage("call_1", []messages.ContentBlock{messages.TextBlock("ok")}, messages.ToolSucceeded)

	first := collect(t, p, context.Background(), llm.NewRequest(testConfig, "", []messages.Message{user}, nil))
	require.True(t, first.has(messages.BlockToolCall))
	require.False(t, first.has(messages.BlockText), "a tool response has no text block")

	for _, history := range [][]messages.Message{
		{user, call, res},
		{user, call, res, pluginMsg(t, "context")},
	} {
		for seed := range int64(20) {
			p := newProvider(t, Config{Seed: seed, TextChunks: 5, ToolCallRate: 1})
			r := collect(t, p, context.Background(), llm.NewRequest(testConfig, "", history, nil))
			require.False(t, r.has(messages.BlockToolCall), "budget 1 is spent after one tool step")
			reason, _ := r.finish()
			require.Equal(t, messages.FinishStop, reason.Kind)
		}
	}

	// A new user prompt resets the budget.
	next := collect(t, p, context.Background(),
		llm.NewRequest(testConfig, "", []messages.Message{user, call, res, userMsg(t, "more")}, nil))
	require.True(t, next.has(messages.BlockToolCall))

	// A larger budget allows another step.
	p2 := newProvider(t, Config{Seed: 1, TextChunks: 5, ToolCallRate: 1, MaxToolSteps: 2})
	r := collect(t, p2, context.Background(), llm.NewRequest(testConfig, "", []messages.Message{user, call, res}, nil))
	require.True(t, r.has(messages.BlockToolCall))
}

func TestToolNames(t *testing.T) {
	tools := []messages.ToolSchema{{Name: "read"}, {Name: "bash"}}
	seen := map[string]bool{}
	for seed := range int64(50) {
		p := newProvider(t, Config{Seed: seed, ToolCallRate: 1, MaxToolCalls: 3})
		r := collect(t, p, context.Background(),
			llm.NewRequest(testConfig, "", []messages.Message{userMsg(t, "x")}, tools))
		require.NoError(t, checkGrammar(r))
		for _, c := range r.chunks {
			if c.Type() == messages.ChunkBlockEnd {
				seen[c.Block().Name()] = true
			}
		}
	}
	require.Equal(t, map[string]bool{"read": true, "bash": true}, seen)

	r := collect(t, newProvider(t, Config{ToolCallRate: 1}), context.Background(), request(t, "s", "x"))
	name, _ := r.chunks[1].Name()
	require.Equal(t, DefaultToolName, name, "no tools offered: Config.ToolName")
}

func TestMaxTokens(t *testing.T) {
	cfg := Config{Seed: 5, TextChunks: 40, ReasoningChunks: 8, ReasoningRate: 1}
	req := llm.NewRequest(testConfig, "", []messages.Message{userMsg(t, "x")}, nil)
	capped := testConfig
	capped.MaxTokens = messages.Some(12)
	r := collect(t, newProvider(t, cfg), context.Background(),
		llm.NewRequest(capped, "", []messages.Message{userMsg(t, "x")}, nil))
	require.NoError(t, r.err)
	require.NoError(t, checkGrammar(r))
	require.Equal(t, 12, r.deltas(messages.ChunkTextDelta)+r.deltas(messages.ChunkReasoningDelta))
	reason, _ := r.finish()
	require.Equal(t, messages.FinishMaxTokens, reason.Kind)

	full := collect(t, newProvider(t, cfg), context.Background(), req)
	reason, _ = full.finish()
	require.Equal(t, messages.FinishStop, reason.Kind)
}

func TestFailureKinds(t *testing.T) {
	req := request(t, "s", "go")
	clean := collect(t, newProvider(t, Config{Seed: 9, TextChunks: 30}), context.Background(), req)
	require.NoError(t, clean.err)

	for _, tc := range []struct {
		mix    FailureMix
		code   string
		status int
		retry  int64
	}{
		{FailureMix{RateLimit: 1}, llm.CodeRateLimit, 429, 1500},
		{FailureMix{Server: 1}, llm.CodeServer, 500, 0},
		{FailureMix{StreamCut: 1}, llm.CodeStreamClosed, 0, 0},
	} {
		t.Run(tc.code, func(t *testing.T) {
			p := newProvider(t, Config{Seed: 9, TextChunks: 30, FailureRate: 1, Failures: tc.mix, RetryAfter: 1499500 * time.Microsecond})
			for range 5 {
				r := collect(t, p, context.Background(), req)
				f, ok := llm.Failure(r.err)
				require.True(t, ok, "error %v is an LlmFailure", r.err)
				require.NoError(t, f.Validate())
				require.Equal(t, tc.code, f.Code)
				require.Equal(t, tc.status, f.Status)
				require.Equal(t, tc.retry, f.ProviderRetryAfterMs)
				if tc.code != llm.CodeStreamClosed {
					require.Empty(t, r.chunks)
					continue
				}
				// A cut stream is a prefix of the response, without its tail.
				_, finished := r.finish()
				require.False(t, finished)
				require.NoError(t, checkGrammar(r))
				require.Equal(t, clean.texts()[:len(r.chunks)], r.texts())
				for _, c := range r.chunks {
					require.NotEqual(t, messages.ChunkBlockEnd, c.Type())
				}
			}
		})
	}
}

func TestFailureRetries(t *testing.T) {
	cfg := Config{Seed: 11, TextChunks: 10, FailureRate: 0.6}
	clean := newProvider(t, Config{Seed: 11, TextChunks: 10})
	a, b := newProvider(t, cfg), newProvider(t, cfg)
	failures, calls := 0, 0
	codes := map[string]int{}
	for i := range 300 {
		req := request(t, fmt.Sprintf("retry-%d", i), "go")
		want := collect(t, clean, context.Background(), req).texts()
		var seqA, seqB []string
		for attempt := 0; ; attempt++ {
			require.Less(t, attempt, 100, "a retry loop must end")
			calls++
			ra, rb := collect(t, a, context.Background(), req), collect(t, b, context.Background(), req)
			seqA, seqB = append(seqA, fmt.Sprint(ra.err)), append(seqB, fmt.Sprint(rb.err))
			if ra.err == nil {
				require.Equal(t, want, ra.texts(), "the successful attempt writes the clean response")
				break
			}
			f, _ := llm.Failure(ra.err)
			codes[f.Code]++
			failures++
		}
		require.Equal(t, seqA, seqB, "the attempts of a request fail alike on every provider with the seed")
	}
	require.InDelta(t, 0.6, float64(failures)/float64(calls), 0.05)
	for _, code := range []string{llm.CodeRateLimit, llm.CodeServer, llm.CodeStreamClosed} {
		require.InDelta(t, 1.0/3, float64(codes[code])/float64(failures), 0.06, code)
	}
	a.mu.Lock()
	require.Empty(t, a.attempts, "succeeded requests are forgotten")
	a.mu.Unlock()
}

func TestCancelMidStream(t *testing.T) {
	p := newProvider(t, Config{Seed: 2, TextChunks: 100})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var got []messages.StreamChunk
	var failure error
	for c, err := range p.Stream(ctx, request(t, "s", "go")) {
		if err != nil {
			failure = err
			continue
		}
		got = append(got, c)
		if len(got) == 10 {
			cancel(fmt.Errorf("user"))
		}
	}
	require.Len(t, got, 10, "nothing after the cancel")
	f, ok := llm.Failure(failure)
	require.True(t, ok)
	require.Equal(t, llm.CodeAborted, f.Code)
	require.Contains(t, f.Message, "user")
}

func TestConsumerStops(t *testing.T) {
	p := newProvider(t, Config{Seed: 2, TextChunks: 100, FirstTokenLatency: time.Millisecond, TokensPerSecond: 1e6})
	n := 0
	for _, err := range p.Stream(context.Background(), request(t, "s", "go")) {
		require.NoError(t, err)
		n++
		if n == 3 {
			break
		}
	}
	require.Equal(t, 3, n)
}

func TestInputTokensGrowWithHistory(t *testing.T) {
	p := newProvider(t, Config{TextChunks: 3})
	usage := func(history []messages.Message) int64 {
		r := collect(t, p, context.Background(), llm.NewRequest(testConfig, "sys", history, nil))
		for _, c := range r.chunks {
			if c.Type() == messages.ChunkUsage {
				return c.Usage().InputTokens
			}
		}
		t.Fatal("no usage")
		return 0
	}
	short := usage([]messages.Message{userMsg(t, "hi")})
	long := usage([]messages.Message{userMsg(t, "hi"), toolCallMsg(t, "c"), userMsg(t, string(slices.Repeat([]byte("x"), 4000)))})
	require.Greater(t, long, short+900)
}
