package synthetic

import (
	"context"
	"encoding/hex"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/messages"
)

// Provider is an offline model: it writes seeded text, reasoning and tool
// calls at a configured speed. It is safe for concurrent use: every call
// derives its own random source from the seed and the request, so
// concurrent calls share nothing but the immutable tables and, when
// failures are injected, a small mutex-guarded attempt counter.
type Provider struct {
	cfg    Config // with defaults
	tables *textTables

	startReasoning messages.StreamChunk    // block-start 0 reasoning
	startText      [2]messages.StreamChunk // block-start 0|1 text
	finishStop     messages.StreamChunk
	finishTools    messages.StreamChunk
	finishMax      messages.StreamChunk

	mu sync.Mutex
	// attempts counts the failed attempts of a request (by request hash)
	// that has not yet succeeded, so that a retry of the same request draws
	// anew. Guarded by mu. An entry is removed when its request succeeds; a
	// request abandoned after a failure leaves its entry, so the map is
	// cleared when it reaches maxTracked entries (which only makes some
	// retries repeat an earlier draw).
	attempts map[uint64]uint32
}

// maxTracked bounds Provider.attempts.
const maxTracked = 1 << 16

var _ llm.Provider = (*Provider)(nil)

// New returns a synthetic provider for cfg, or the error of cfg.Validate.
// The first provider of a ChunkSize pregenerates the delta tables of that
// size (a few hundred KiB, kept for the process); each provider then holds
// only the text its longest block needs. One provider serves any number of
// sessions.
func New(cfg Config) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	p := &Provider{
		cfg:            cfg,
		tables:         newTextTables(cfg.ChunkSize, maxPieces(cfg)),
		startReasoning: messages.BlockStartChunk(0, messages.BlockReasoning),
		startText: [2]messages.StreamChunk{
			messages.BlockStartChunk(0, messages.BlockText),
			messages.BlockStartChunk(1, messages.BlockText),
		},
		finishStop:  messages.FinishChunk(messages.FinishReason{Kind: messages.FinishStop}, messages.JSON{}),
		finishTools: messages.FinishChunk(messages.FinishReason{Kind: messages.FinishToolCalls}, messages.JSON{}),
		finishMax:   messages.FinishChunk(messages.FinishReason{Kind: messages.FinishMaxTokens}, messages.JSON{}),
		attempts:    make(map[uint64]uint32),
	}
	return p, nil
}

// Name returns Config.Name.
func (p *Provider) Name() string { return p.cfg.Name }

// Model returns Config.Model.
func (p *Provider) Model() string { return p.cfg.Model }

// Config returns the configuration in use, defaults filled in.
func (p *Provider) Config() Config { return p.cfg }

// Stream performs one call. The response is a function of the seed and the
// request (its session id, purpose, length and last message): see the
// package documentation for the shape, the pacing and the failures. The
// iterator yields chunks and at most one error, a messages.LlmFailure; it
// may be ranged over once.
func (p *Provider) Stream(ctx context.Context, req llm.Request) iter.Seq2[messages.StreamChunk, error] {
	return func(yield func(messages.StreamChunk, error) bool) {
		p.run(ctx, req, yield)
	}
}

// blockPlan is one block of a planned response.
type blockPlan struct {
	typ   messages.BlockType
	index int
	n     int // deltas
	start int // first corpus piece (text, reasoning)
	call  *callPlan

	emitted int // deltas sent so far
}

// callPlan is a planned tool call.
type callPlan struct {
	id, name, args string
}

// failKind is an injected failure.
type failKind uint8

const (
	failNone failKind = iota
	failRateLimit
	failServer
	failStreamCut
)

func (p *Provider) run(ctx context.Context, req llm.Request, yield func(messages.StreamChunk, error) bool) {
	e := emitter{ctx: ctx, done: ctx.Done(), yield: yield}
	e.pace.init(p.cfg, e.done)
	defer e.pace.stop()

	h := requestHash(p.cfg.Seed, req)
	fail := p.decideFailure(h)
	switch fail {
	case failRateLimit:
		if e.pace.waitFirst() {
			yield(messages.StreamChunk{}, messages.LlmFailure{
				Message: "synthetic: rate limited (HTTP 429)", Code: llm.CodeRateLimit, Status: 429,
				ProviderRetryAfterMs: int64((p.cfg.RetryAfter + time.Millisecond - 1) / time.Millisecond),
			})
		} else {
			e.abort()
		}
		return
	case failServer:
		if e.pace.waitFirst() {
			yield(messages.StreamChunk{}, messages.LlmFailure{
				Message: "synthetic: internal server error (HTTP 500)", Code: llm.CodeServer, Status: 500,
			})
		} else {
			e.abort()
		}
		return
	}

	// The content draws come from their own source, independent of the
	// attempt, so a retried request that succeeds writes what a first
	// attempt would have written.
	var r rng
	r.seed(h)
	blocks, total := p.plan(&r, req)

	limit := total
	finish := p.finishStop
	if len(blocks) > 0 && blocks[len(blocks)-1].call != nil {
		finish = p.finishTools
	}
	if mt, ok := req.Config().MaxTokens.Get(); ok && int64(total) > mt {
		limit, finish = int(mt), p.finishMax
	}
	if fail == failStreamCut {
		var fr rng
		fr.seed(h ^ 0x5bd1e995)
		limit = fr.intn(limit) // deltas served before the cut, short of the end
	}

	// Deltas, block by block; a block opens just before its first delta
	// and every block stays open until the tail (DeepSeek holds block ends
	// back until [DONE]).
deltas:
	for bi := range blocks {
		b := &blocks[bi]
		for k := range b.n {
			if e.tokens == limit {
				break deltas
			}
			// A block opens when its first delta is due, not before.
			if !e.due() || (k == 0 && !e.send(p.blockStart(b))) || !e.token(p.delta(b, k)) {
				return
			}
			b.emitted++
		}
	}
	if fail == failStreamCut {
		if !e.checkCancel() {
			return
		}
		yield(messages.StreamChunk{}, messages.LlmFailure{
			Message: fmt.Sprintf("synthetic: stream closed after %d tokens without [DONE]", e.tokens),
			Code:    llm.CodeStreamClosed,
		})
		return
	}
	if !e.pace.waitTail(e.tokens) {
		e.abort()
		return
	}
	var reasoning int64
	for bi := range blocks {
		b := &blocks[bi]
		if b.emitted == 0 {
			continue
		}
		if b.typ == messages.BlockReasoning {
			reasoning += int64(b.emitted)
		}
		if !e.send(messages.BlockEndChunk(b.index, p.block(b, b.emitted))) {
			return
		}
	}
	u := messages.TokenUsage{InputTokens: inputTokens(req), OutputTokens: int64(e.tokens)}
	if blocks[0].typ == messages.BlockReasoning {
		u.ReasoningTokens = messages.Some(reasoning)
	}
	if !e.send(messages.UsageChunk(u)) {
		return
	}
	e.send(finish)
}

// plan draws the blocks of a response and returns them with their total
// number of deltas. The order of the draws is part of the determinism
// contract: changing it changes every seed's output.
func (p *Provider) plan(r *rng, req llm.Request) ([]blockPlan, int) {
	c := &p.cfg
	blocks := make([]blockPlan, 0, 2)
	total := 0
	if r.float() < c.ReasoningRate {
		n := r.count(c.ReasoningChunks)
		blocks = append(blocks, blockPlan{typ: messages.BlockReasoning, index: 0, n: n, start: p.tables.startPiece(r)})
		total += n
	}
	if r.float() < c.ToolCallRate && toolBudgetLeft(req, c.MaxToolSteps) {
		var names []string
		for _, t := range req.Tools() {
			names = append(names, t.Name)
		}
		if len(names) == 0 {
			names = []string{c.ToolName}
		}
		calls := 1 + r.intn(c.MaxToolCalls)
		for range calls {
			cp := &callPlan{name: names[r.intn(len(names))]}
			var id [8]byte
			r.fill(id[:])
			cp.id = "call_" + hex.EncodeToString(id[:])
			args := append(make([]byte, 0, 96), `{"text":"`...)
			args = appendWords(args, r, 4+r.intn(8))
			cp.args = string(append(args, `"}`...))
			n := (len(cp.args) + c.ChunkSize - 1) / c.ChunkSize
			blocks = append(blocks, blockPlan{typ: messages.BlockToolCall, index: len(blocks), n: n, call: cp})
			total += n
		}
		return blocks, total
	}
	n := r.count(c.TextChunks)
	blocks = append(blocks, blockPlan{typ: messages.BlockText, index: len(blocks), n: n, start: p.tables.startPiece(r)})
	return blocks, total + n
}

// blockStart returns the block-start chunk of b.
func (p *Provider) blockStart(b *blockPlan) messages.StreamChunk {
	switch b.typ {
	case messages.BlockReasoning:
		return p.startReasoning
	case messages.BlockText:
		return p.startText[b.index]
	}
	return messages.BlockStartChunk(b.index, b.typ)
}

// delta returns delta k of b. The first delta of a tool call carries its
// name.
func (p *Provider) delta(b *blockPlan, k int) messages.StreamChunk {
	if b.call == nil {
		return p.tables.delta(b.typ, b.index, b.start, k)
	}
	lo := k * p.cfg.ChunkSize
	hi := min(lo+p.cfg.ChunkSize, len(b.call.args))
	if k == 0 {
		return messages.NamedToolCallDeltaChunk(b.index, b.call.id, b.call.name, b.call.args[lo:hi])
	}
	return messages.ToolCallDeltaChunk(b.index, b.call.id, b.call.args[lo:hi])
}

// block returns the assembled block of b after n deltas (fewer than b.n
// when max-tokens cut it).
func (p *Provider) block(b *blockPlan, n int) messages.ContentBlock {
	switch b.typ {
	case messages.BlockReasoning:
		return messages.ReasoningBlock(p.tables.blockText(b.start, n))
	case messages.BlockText:
		return messages.TextBlock(p.tables.blockText(b.start, n))
	}
	return messages.ToolCallBlock(b.call.id, b.call.name, b.call.args[:min(n*p.cfg.ChunkSize, len(b.call.args))])
}

// decideFailure draws whether this attempt of the request hashed h fails,
// and how, and keeps the attempt count.
func (p *Provider) decideFailure(h uint64) failKind {
	if p.cfg.FailureRate == 0 {
		return failNone
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	attempt := p.attempts[h]
	var r rng
	r.seed(h ^ (uint64(attempt)+1)*0x9e3779b97f4a7c15)
	if r.float() >= p.cfg.FailureRate {
		if attempt > 0 {
			delete(p.attempts, h)
		}
		return failNone
	}
	if len(p.attempts) >= maxTracked {
		clear(p.attempts)
	}
	p.attempts[h] = attempt + 1
	m := p.cfg.Failures
	x := r.float() * (m.RateLimit + m.Server + m.StreamCut)
	switch {
	case x < m.RateLimit:
		return failRateLimit
	case x < m.RateLimit+m.Server:
		return failServer
	}
	return failStreamCut
}

// toolBudgetLeft reports whether the turn the request belongs to may still
// call tools: fewer than budget assistant responses since the last message
// a person wrote (source user). Tool results and plugin-sourced context
// neither count nor reset the budget, so context injected at every step
// cannot make a turn loop forever.
func toolBudgetLeft(req llm.Request, budget int) bool {
	steps := 0
	for i := req.NumMessages() - 1; i >= 0; i-- {
		m := req.Message(i)
		if m.Role() == messages.RoleAssistant {
			steps++
			continue
		}
		if m.Source().Kind() == messages.SourceUser {
			break
		}
	}
	return steps < budget
}

// inputTokens estimates the prompt size: about four bytes of JSON per
// token over the history and the system prompt.
func inputTokens(req llm.Request) int64 {
	n := len(req.System())
	for _, m := range req.Messages() {
		n += m.JSON().Len()
	}
	return int64(n/4 + 1)
}

// requestHash mixes the seed with what identifies a request: its session,
// purpose, length and last message (role and content, not the id, so a
// run that mints fresh ids reproduces the same output).
func requestHash(seed int64, req llm.Request) uint64 {
	h := fnvU64(fnvOffset, uint64(seed))
	h = fnvU64(h, uint64(req.NumMessages()))
	h = fnvString(h, req.SessionID())
	h = fnvString(h, req.Purpose())
	if n := req.NumMessages(); n > 0 {
		m := req.Message(n - 1)
		h = fnvString(h, string(m.Role()))
		for b := range m.Blocks() {
			h = fnvString(h, b.JSON().String())
		}
	}
	return h
}
