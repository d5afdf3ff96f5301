package deepseek

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/messages"
)

// decoder is the pure core of the adapter: it turns the JSON payloads of one
// stream into StreamChunks (docs/messages.md#stream-chunks), with no I/O,
// clock or goroutine. The shell (Provider.Stream) feeds it event data and
// yields what it returns.
//
// Emission order, the DeepSeek adapter's own:
//   - a block opens (block-start) when its first non-empty delta arrives,
//     and its deltas stream as they arrive;
//   - within one wire delta, reasoning_content is handled before content,
//     and content before tool_calls, so a reasoning block opens before the
//     text block of the same response;
//   - every block-end, then the usage, then the finish are held back until
//     [DONE], because the wire says nothing about a block being complete
//     before the finish_reason, and usage may come after it (OpenAI sends
//     it in a later chunk with choices: []).
//
// Blocks are numbered 0, 1, 2, ... in first-seen order. A response has at
// most one reasoning block and one text block: a reasoning delta after
// text has begun extends the reasoning block (it is not a new one), so the
// indexes stay stable. Tool calls are keyed by their wire index, never by
// id (only the first delta of a call carries the id).
//
// A decoder is used for one stream and is not safe for concurrent use.
type decoder struct {
	p         *Provider // for failures (name, redaction); nothing else
	blocks    []*partial
	reasoning int // block index of the reasoning block, -1 for none
	text      int // block index of the text block, -1 for none
	lastTool  int // block index of the most recent tool call, -1 for none

	finish    string // the wire finish_reason, "" until seen
	usage     messages.TokenUsage
	usageSeen bool
	out       []messages.StreamChunk // reused between calls
}

// partial is a block being assembled.
type partial struct {
	typ      messages.BlockType
	text     strings.Builder // text, reasoning: the text; tool-call: the arguments
	wire     int             // tool-call: the wire index (-1 when the server sent none)
	id, name string          // tool-call
	named    bool            // tool-call: a delta carrying the name was emitted
}

func newDecoder(p *Provider) *decoder {
	return &decoder{p: p, reasoning: -1, text: -1, lastTool: -1}
}

// event decodes one data payload. The returned chunks are valid until the
// next call. A non-nil failure ends the stream: a malformed payload or an
// error object sent in the stream.
func (d *decoder) event(data []byte) ([]messages.StreamChunk, *messages.LlmFailure) {
	d.out = d.out[:0]
	var c wireChunk
	if err := json.Unmarshal(data, &c); err != nil {
		f := d.p.failure(llm.CodeMalformedResponse, 0, "malformed stream chunk: %v: %s", err, cut(string(data)))
		return nil, &f
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		f := d.p.streamErrorFailure(data)
		return nil, &f
	}
	for i := range c.Choices {
		ch := &c.Choices[i]
		if ch.Index != 0 {
			continue // n > 1 is never requested; a stray choice is not ours
		}
		d.delta(&ch.Delta)
		if ch.FinishReason != "" && d.finish == "" {
			d.finish = d.p.redact(ch.FinishReason)
		}
	}
	if c.Usage != nil {
		// The last one wins: a server that repeats usage sends the
		// running total.
		d.usage, d.usageSeen = mapUsage(c.Usage), true
	}
	return d.out, nil
}

func (d *decoder) delta(w *wireDelta) {
	// Every string the server sends is redacted before it is kept (see
	// Provider.redact).
	r := w.ReasoningContent
	if r == "" {
		r = w.Reasoning
	}
	r = d.p.redact(r)
	if r != "" {
		d.reasoning = d.open(d.reasoning, messages.BlockReasoning)
		d.blocks[d.reasoning].text.WriteString(r)
		d.out = append(d.out, messages.ReasoningDeltaChunk(d.reasoning, r))
	}
	if content := d.p.redact(w.Content); content != "" {
		d.text = d.open(d.text, messages.BlockText)
		d.blocks[d.text].text.WriteString(content)
		d.out = append(d.out, messages.TextDeltaChunk(d.text, content))
	}
	for i := range w.ToolCalls {
		d.toolCall(&w.ToolCalls[i])
	}
}

// open returns idx when it names an open block, else opens a block of
// type t and returns its index.
func (d *decoder) open(idx int, t messages.BlockType) int {
	if idx >= 0 {
		return idx
	}
	idx = len(d.blocks)
	d.blocks = append(d.blocks, &partial{typ: t, wire: -1})
	d.out = append(d.out, messages.BlockStartChunk(idx, t))
	return idx
}

func (d *decoder) toolCall(tc *wireToolCallDelta) {
	tc.ID = d.p.redact(tc.ID)
	tc.Function.Name = d.p.redact(tc.Function.Name)
	tc.Function.Arguments = d.p.redact(tc.Function.Arguments)
	idx := d.findTool(tc)
	if idx < 0 {
		idx = len(d.blocks)
		b := &partial{typ: messages.BlockToolCall, wire: -1, id: tc.ID}
		if tc.Index != nil {
			b.wire = *tc.Index
		}
		if b.id == "" {
			// The assembler's own fallback, fixed here at the
			// first delta so every chunk of the call carries the same id.
			b.id = "call-" + strconv.Itoa(idx)
		}
		d.blocks = append(d.blocks, b)
		d.out = append(d.out, messages.BlockStartChunk(idx, messages.BlockToolCall))
	}
	d.lastTool = idx
	b := d.blocks[idx]
	args := tc.Function.Arguments
	b.text.WriteString(args)
	switch {
	case !b.named && tc.Function.Name != "":
		// The first delta with the name carries it, even with empty
		// arguments: that is the call's first token.
		b.name, b.named = tc.Function.Name, true
		d.out = append(d.out, messages.NamedToolCallDeltaChunk(idx, b.id, b.name, args))
	case args != "":
		d.out = append(d.out, messages.ToolCallDeltaChunk(idx, b.id, args))
	}
}

// findTool returns the block index of the call tc continues, or -1 for a
// new call. With a wire index (every server seen so far sends one) the
// index decides. Without one, a delta with a new id starts a call and
// anything else continues the last one.
func (d *decoder) findTool(tc *wireToolCallDelta) int {
	if tc.Index != nil {
		for i, b := range d.blocks {
			if b.typ == messages.BlockToolCall && b.wire == *tc.Index {
				return i
			}
		}
		return -1
	}
	if tc.ID != "" {
		for i, b := range d.blocks {
			if b.typ == messages.BlockToolCall && b.id == tc.ID {
				return i
			}
		}
		return -1
	}
	return d.lastTool
}

// done handles [DONE]: every block-end in index order, the usage, then the
// finish, or a failure (after the block-ends and usage, which the
// runtime's assembler may still use) when the finish_reason is not a
// success.
func (d *decoder) done() ([]messages.StreamChunk, *messages.LlmFailure) {
	d.out = d.out[:0]
	if d.finish == "" {
		f := d.p.failure(llm.CodeMalformedResponse, 0, "stream ended with [DONE] but no finish_reason")
		return nil, &f
	}
	for i, b := range d.blocks {
		var blk messages.ContentBlock
		// Redacted again whole: a key split across deltas is caught here.
		text := d.p.redact(b.text.String())
		switch b.typ {
		case messages.BlockText:
			blk = messages.TextBlock(text)
		case messages.BlockReasoning:
			blk = messages.ReasoningBlock(text)
		default:
			blk = messages.ToolCallBlock(b.id, b.name, text)
		}
		d.out = append(d.out, messages.BlockEndChunk(i, blk))
	}
	if d.usageSeen {
		d.out = append(d.out, messages.UsageChunk(d.usage))
	}
	var kind messages.FinishKind
	switch d.finish {
	case "stop":
		if len(d.blocks) == 0 {
			f := d.p.failure(llm.CodeEmptyResponse, 0, "finish_reason stop with no content")
			return d.out, &f
		}
		kind = messages.FinishStop
	case "tool_calls":
		kind = messages.FinishToolCalls
	case "length":
		kind = messages.FinishMaxTokens
	default:
		f := d.p.failure(finishCode(d.finish), 0, "finish_reason %q", d.finish)
		return d.out, &f
	}
	d.out = append(d.out, messages.FinishChunk(messages.FinishReason{Kind: kind}, messages.JSON{}))
	return d.out, nil
}

// finishCode upper-cases an unknown finish_reason into a failure code
// (content_filter → CONTENT_FILTER), keeping only [A-Z0-9_] so the code
// stays a code whatever the server sends.
func finishCode(reason string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(reason) {
		switch {
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// mapUsage converts the wire usage (docs/messages.md#token-usage): the counts
// are disjoint, so cache hits, which prompt_tokens includes, are subtracted
// from the input. cacheReadTokens is present when the server reported a hit
// count (0 included); reasoningTokens when it reported one.
func mapUsage(w *wireUsage) messages.TokenUsage {
	u := messages.TokenUsage{InputTokens: w.PromptTokens, OutputTokens: w.CompletionTokens}
	hit := w.PromptCacheHitTokens
	if hit == nil && w.PromptTokensDetails != nil {
		hit = w.PromptTokensDetails.CachedTokens
	}
	if hit != nil {
		h := max(0, *hit)
		u.CacheReadTokens = messages.Some(h)
		u.InputTokens = w.PromptTokens - h
	}
	if w.CompletionTokensDetails != nil && w.CompletionTokensDetails.ReasoningTokens != nil {
		u.ReasoningTokens = messages.Some(max(0, *w.CompletionTokensDetails.ReasoningTokens))
	}
	u.InputTokens = max(0, u.InputTokens)
	u.OutputTokens = max(0, u.OutputTokens)
	return u
}
