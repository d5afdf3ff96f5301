package llm

import (
	"strconv"
	"strings"

	"github.com/dshgo/dsh/messages"
)

// BlockAssembler turns a model's stream chunks into content blocks. It is the
// single assembly algorithm (docs/messages.md#stream-chunks; the reference
// has the same one), and it is tolerant where the grammar (GrammarChecker) is
// strict, because it must make sense of recorded streams as they are:
//
//   - blocks are kept in the order their index was first seen;
//   - a delta without a prior block-start opens its block implicitly, with
//     the delta's type;
//   - deltas after the block-end of their index are ignored, and so are
//     deltas whose type does not match their block's (rule 3 of the
//     grammar; the reference would append them, dsh refuses to mix a
//     reasoning delta into a text block);
//   - the first block-end of an index wins: its block is the authoritative
//     one, whatever the deltas said; later block-ends are ignored;
//   - an open text or reasoning block assembles from its accumulated text;
//     an open tool-call block from its deltas: arguments concatenated, the
//     first non-empty id (else "call-<index>"), the first non-empty name
//     (else "");
//   - an open block of any other type (a block-start for an image, say) has
//     nothing to assemble from and is left out, as a dropped block;
//   - usage keeps the last value seen; the finish defaults to stop when the
//     stream has none; chunks after a finish are ignored;
//   - a max-tokens finish drops every tool-call block, open or closed: a
//     truncated call must never be executed;
//   - the finish's replay envelope follows the kept blocks: when it has a
//     blocks member whose length differs from the number of blocks seen (or
//     that is not an array), the whole envelope is dropped; otherwise the
//     entries of dropped blocks are pruned with them.
//
// Cost: Push does no allocation for a delta beyond the amortised growth of
// its block's text buffer (a strings.Builder per block) and one allocation
// per new block. The block of the previous chunk is cached, since deltas
// come in runs, and past a few dozen blocks an index map replaces the
// linear scan. Blocks, InterruptedBlocks and ReplayState build new values on
// each call; call them once, at the end.
//
// The zero BlockAssembler is ready for a stream; Reset makes it ready for
// the next one. It is not safe for concurrent use: one assembler belongs to
// one consumer (the agent actor, for the step in flight).
type BlockAssembler struct {
	blocks []*asmBlock
	// last is the position in blocks of the block the previous chunk
	// touched (0 before any): the cache that makes runs of deltas O(1).
	last int
	// byIndex maps a block index to its position in blocks once there are
	// more than linearLimit blocks; nil before.
	byIndex map[int]int

	usage    messages.TokenUsage
	hasUsage bool
	finish   messages.FinishReason
	replay   messages.JSON
	finished bool
}

// linearLimit is the number of blocks up to which a lookup scans the block
// list rather than keeping an index map. Streams rarely have more than a
// handful of blocks; a scan of a few pointers beats hashing.
const linearLimit = 32

// asmBlock is one block being assembled.
type asmBlock struct {
	index int
	typ   messages.BlockType
	// text accumulates the text of a text or reasoning block, or the
	// arguments of a tool-call block. Held by pointer in blocks, so the
	// builder is never copied (strings.Builder forbids it).
	text  strings.Builder
	id    string // tool-call: first non-empty id of its deltas
	name  string // tool-call: first non-empty name of its deltas
	ended bool
	final messages.ContentBlock // the block of the first block-end
}

// Reset empties the assembler for a new stream (a retry, the next step).
func (a *BlockAssembler) Reset() {
	clear(a.blocks)
	*a = BlockAssembler{blocks: a.blocks[:0]}
}

// find returns the block of index, or nil.
func (a *BlockAssembler) find(index int) *asmBlock {
	if a.last < len(a.blocks) && a.blocks[a.last].index == index {
		return a.blocks[a.last]
	}
	if a.byIndex != nil {
		if pos, ok := a.byIndex[index]; ok {
			a.last = pos
			return a.blocks[pos]
		}
		return nil
	}
	for pos, b := range a.blocks {
		if b.index == index {
			a.last = pos
			return b
		}
	}
	return nil
}

// add appends a new block for index, in first-seen order.
func (a *BlockAssembler) add(index int, typ messages.BlockType) *asmBlock {
	b := &asmBlock{index: index, typ: typ}
	a.last = len(a.blocks)
	a.blocks = append(a.blocks, b)
	switch {
	case a.byIndex != nil:
		a.byIndex[index] = a.last
	case len(a.blocks) > linearLimit:
		a.byIndex = make(map[int]int, 2*len(a.blocks))
		for pos, b := range a.blocks {
			a.byIndex[b.index] = pos
		}
	}
	return b
}

// Push feeds the next chunk. It never fails: a chunk the rules above ignore
// is simply ignored (GrammarChecker is where violations are reported).
func (a *BlockAssembler) Push(c messages.StreamChunk) {
	if a.finished {
		return
	}
	switch t := c.Type(); t {
	case messages.ChunkTextDelta, messages.ChunkReasoningDelta, messages.ChunkToolCallDelta:
		want := deltaBlockType(t)
		b := a.find(c.Index())
		if b == nil {
			b = a.add(c.Index(), want)
		}
		if b.ended || b.typ != want {
			return
		}
		b.text.WriteString(c.Text())
		if t == messages.ChunkToolCallDelta {
			if b.id == "" {
				b.id = c.CallID()
			}
			if b.name == "" {
				if n, ok := c.Name(); ok {
					b.name = n
				}
			}
		}
	case messages.ChunkBlockStart:
		if a.find(c.Index()) == nil {
			a.add(c.Index(), c.BlockType())
		}
	case messages.ChunkBlockEnd:
		b := a.find(c.Index())
		if b == nil {
			b = a.add(c.Index(), c.Block().Type())
		}
		if !b.ended {
			b.ended = true
			b.final = c.Block()
		}
	case messages.ChunkUsage:
		a.usage, a.hasUsage = c.Usage(), true
	case messages.ChunkFinish:
		a.finished = true
		a.finish = c.Reason()
		a.replay = c.ReplayState()
	}
}

// assemble returns the block b stands for, and false when it is dropped:
// every tool call under a max-tokens finish, and open blocks of a type with
// nothing to assemble from.
func (a *BlockAssembler) assemble(b *asmBlock) (messages.ContentBlock, bool) {
	typ := b.typ
	if b.ended {
		typ = b.final.Type()
	}
	if typ == messages.BlockToolCall && a.finished && a.finish.Kind == messages.FinishMaxTokens {
		return messages.ContentBlock{}, false
	}
	if b.ended {
		return b.final, true
	}
	switch typ {
	case messages.BlockText:
		return messages.TextBlock(b.text.String()), true
	case messages.BlockReasoning:
		return messages.ReasoningBlock(b.text.String()), true
	case messages.BlockToolCall:
		id := b.id
		if id == "" {
			id = "call-" + strconv.Itoa(b.index)
		}
		return messages.ToolCallBlock(id, b.name, b.text.String()), true
	}
	return messages.ContentBlock{}, false
}

// Blocks returns the assembled content, in first-seen order, without the
// dropped blocks. The slice is owned by the caller (the blocks are
// immutable values). It is nil when there is no block.
func (a *BlockAssembler) Blocks() []messages.ContentBlock {
	var out []messages.ContentBlock
	for _, b := range a.blocks {
		if cb, ok := a.assemble(b); ok {
			if out == nil {
				out = make([]messages.ContentBlock, 0, len(a.blocks))
			}
			out = append(out, cb)
		}
	}
	return out
}

// NumBlocks returns the number of blocks seen so far, dropped ones
// included: the length a replay envelope's blocks member must have.
func (a *BlockAssembler) NumBlocks() int { return len(a.blocks) }

// Usage returns the last usage reported, and whether there was one.
func (a *BlockAssembler) Usage() (messages.TokenUsage, bool) { return a.usage, a.hasUsage }

// Finish returns the stream's finish reason: stop when no finish was seen.
func (a *BlockAssembler) Finish() messages.FinishReason {
	if !a.finished {
		return messages.FinishReason{Kind: messages.FinishStop}
	}
	return a.finish
}

// Finished reports whether a finish chunk was seen.
func (a *BlockAssembler) Finished() bool { return a.finished }

// ReplayState returns the replay envelope to store in the assistant
// message's model source, following the kept blocks (see the type's
// comment); the zero JSON means none. An envelope that is not an object is
// adapter-owned and opaque: it is returned as it is.
func (a *BlockAssembler) ReplayState() messages.JSON {
	rs := a.replay
	if rs.Kind() != messages.KindObject {
		return rs
	}
	entries, ok := rs.Field("blocks")
	if !ok {
		return rs
	}
	if entries.Kind() != messages.KindArray {
		return messages.JSON{}
	}
	n := 0
	for range entries.Elements() {
		n++
	}
	if n != len(a.blocks) {
		return messages.JSON{}
	}
	var kept []messages.JSON
	pruned := false
	i := 0
	for e := range entries.Elements() {
		if _, ok := a.assemble(a.blocks[i]); ok {
			kept = append(kept, e)
		} else {
			pruned = true
		}
		i++
	}
	if !pruned {
		return rs
	}
	var o messages.ObjectBuilder
	for k, v := range rs.Members() {
		if k == "blocks" {
			v = messages.ArrayOf(kept...)
		}
		o.Raw(k, v)
	}
	return o.Build()
}

// InterruptedBlocks returns what a cancelled stream leaves worth keeping
// (used only on cancellation): its text and reasoning blocks,
// open or closed, whose text is not whitespace-only, in stream order. Tool
// calls are dropped whether open or closed: a call cut off by a cancel must
// not be executed. The slice is owned by the caller; nil when empty.
func (a *BlockAssembler) InterruptedBlocks() []messages.ContentBlock {
	var out []messages.ContentBlock
	for _, b := range a.blocks {
		var cb messages.ContentBlock
		switch {
		case b.ended:
			cb = b.final
		case b.typ == messages.BlockText:
			cb = messages.TextBlock(b.text.String())
		case b.typ == messages.BlockReasoning:
			cb = messages.ReasoningBlock(b.text.String())
		default:
			continue
		}
		if t := cb.Type(); t != messages.BlockText && t != messages.BlockReasoning {
			continue
		}
		if isJSWhitespace(cb.Text()) {
			continue
		}
		out = append(out, cb)
	}
	return out
}

// isJSWhitespace reports whether s is empty after JavaScript's
// String.prototype.trim, which the reference uses: its white space and line
// terminators differ from unicode.IsSpace (U+FEFF is space, U+0085 is not).
func isJSWhitespace(s string) bool {
	for _, r := range s {
		switch r {
		case '\t', '\n', '\v', '\f', '\r', ' ', '\u00a0', '\u1680', '\u2028', '\u2029',
			'\u202f', '\u205f', '\u3000', '\ufeff':
		default:
			if r < '\u2000' || r > '\u200a' {
				return false
			}
		}
	}
	return true
}
