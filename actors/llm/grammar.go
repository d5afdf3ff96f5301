package llm

import (
	"errors"
	"fmt"

	"github.com/dshgo/dsh/messages"
)

// ErrGrammar marks a stream that breaks the chunk grammar of
// docs/messages.md#stream-chunks.
// Every error of GrammarChecker wraps it, so callers test with errors.Is.
var ErrGrammar = errors.New("llm: stream grammar violation")

// maxSafeIndex is JavaScript's Number.MAX_SAFE_INTEGER: the reference
// requires every block index to be a non-negative safe integer (rule 1).
const maxSafeIndex = 1<<53 - 1

// GrammarChecker checks a stream of chunks against the grammar of
// docs/messages.md#stream-chunks, as the reference's own checker does:
//
//  1. every index is a non-negative safe integer;
//  2. a block-start index may not repeat while that block is open;
//  3. a delta must target an open block of its matching type;
//  4. a block-end must close an open block of the same type;
//  5. at most one usage;
//  6. exactly one terminal finish, and nothing after it;
//  7. a finish with open blocks is legal only for error or aborted.
//
// One tolerance departs from the reference
// (docs/session-log.md#where-dsh-differs-from-the-reference): a max-tokens finish
// may leave tool-call blocks open. The reference's invariant rejects that,
// yet its own recordings (the fixture max-tokens-continue) contain it: the
// DeepSeek adapter cannot close a call whose arguments were cut off. Since
// the assembler drops every tool call on max-tokens anyway, the stream is
// still well defined; rejecting it would make a recorded, real stream
// "invalid". Open text or reasoning blocks on max-tokens stay violations:
// no recording shows them.
//
// A block-start for an index whose block was already closed is accepted,
// as rule 2 says only "while that block is open". The assembler ignores it.
//
// The zero GrammarChecker is ready for a new stream. It is not safe for
// concurrent use. It is a testing aid and the invariants-build guard of
// Run, not a hot-path component: it keeps a map of blocks.
type GrammarChecker struct {
	// blocks maps every index seen in a block-start, delta or block-end to
	// its block's state.
	blocks   map[int]grammarBlock
	usages   int
	finished bool
	chunks   int
}

type grammarBlock struct {
	typ  messages.BlockType
	open bool
}

// deltaBlockType returns the block type a delta chunk must target, or ""
// for a chunk that is not a delta.
func deltaBlockType(t messages.ChunkType) messages.BlockType {
	switch t {
	case messages.ChunkTextDelta:
		return messages.BlockText
	case messages.ChunkReasoningDelta:
		return messages.BlockReasoning
	case messages.ChunkToolCallDelta:
		return messages.BlockToolCall
	}
	return ""
}

// Check checks the next chunk. It returns an error wrapping ErrGrammar
// naming the rule and the chunk's position (0-based) when the chunk breaks
// the grammar; the checker's state is then unspecified for later chunks.
func (g *GrammarChecker) Check(c messages.StreamChunk) error {
	pos := g.chunks
	g.chunks++
	if g.finished {
		return g.fail(pos, 6, "%s chunk after the finish", c.Type())
	}
	switch t := c.Type(); t {
	case messages.ChunkBlockStart, messages.ChunkTextDelta, messages.ChunkReasoningDelta,
		messages.ChunkToolCallDelta, messages.ChunkBlockEnd:
		idx := c.Index()
		if idx < 0 || idx > maxSafeIndex {
			return g.fail(pos, 1, "%s index %d is not a non-negative safe integer", t, idx)
		}
		if g.blocks == nil {
			g.blocks = make(map[int]grammarBlock)
		}
		b, seen := g.blocks[idx]
		switch t {
		case messages.ChunkBlockStart:
			if seen && b.open {
				return g.fail(pos, 2, "block-start for index %d, which is still open", idx)
			}
			if c.BlockType() == "" {
				return g.fail(pos, 2, "block-start for index %d has no block type", idx)
			}
			g.blocks[idx] = grammarBlock{typ: c.BlockType(), open: true}
		case messages.ChunkBlockEnd:
			bt := c.Block().Type()
			switch {
			case !seen || !b.open:
				return g.fail(pos, 4, "block-end for index %d, which is not open", idx)
			case b.typ != bt:
				return g.fail(pos, 4, "block-end of type %q closes open %q block %d", bt, b.typ, idx)
			}
			g.blocks[idx] = grammarBlock{typ: b.typ}
		default:
			want := deltaBlockType(t)
			switch {
			case !seen || !b.open:
				return g.fail(pos, 3, "%s for index %d, which is not open", t, idx)
			case b.typ != want:
				return g.fail(pos, 3, "%s targets %q block %d", t, b.typ, idx)
			}
		}
	case messages.ChunkUsage:
		g.usages++
		if g.usages > 1 {
			return g.fail(pos, 5, "second usage chunk")
		}
	case messages.ChunkFinish:
		g.finished = true
		kind := c.Reason().Kind
		if kind == messages.FinishError || kind == messages.FinishAborted {
			return nil
		}
		for idx, b := range g.blocks {
			if !b.open {
				continue
			}
			if kind == messages.FinishMaxTokens && b.typ == messages.BlockToolCall {
				continue // the recorded quirk, see the type's comment
			}
			return g.fail(pos, 7, "%s finish with %q block %d open", kind, b.typ, idx)
		}
	default:
		return g.fail(pos, 0, "unknown chunk type %q", t)
	}
	return nil
}

// End reports a stream that ended without a finish (rule 6).
func (g *GrammarChecker) End() error {
	if !g.finished {
		return g.fail(g.chunks, 6, "stream ended without a finish")
	}
	return nil
}

func (g *GrammarChecker) fail(pos, rule int, format string, args ...any) error {
	return fmt.Errorf("%w: chunk %d: rule %d: %s", ErrGrammar, pos, rule, fmt.Sprintf(format, args...))
}
