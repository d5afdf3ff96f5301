package llm

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/dshgo/dsh/messages"
	"github.com/stretchr/testify/require"
)

func assemble(cs ...messages.StreamChunk) *BlockAssembler {
	var a BlockAssembler
	for _, c := range cs {
		a.Push(c)
	}
	return &a
}

func requireBlocks(t *testing.T, want []messages.ContentBlock, got []messages.ContentBlock) {
	t.Helper()
	require.Equal(t, jsonTexts(want), jsonTexts(got))
}

// Scenario 5 (assembler.spec.ts): tolerates deltas without explicit
// block-start/end: blocks are assembled from deltas alone.
func TestToleratesDeltasWithoutExplicitBlockStartEnd(t *testing.T) {
	a := assemble(
		thinking(0, "The user "),
		thinking(0, "greets."),
		text(1, "Hel"),
		toolName(2, "call_7", "greet", `{"to":`),
		text(1, "lo!"),
		toolArgs(2, "call_7", `"you"}`),
	)
	requireBlocks(t, []messages.ContentBlock{
		messages.ReasoningBlock("The user greets."),
		messages.TextBlock("Hello!"),
		messages.ToolCallBlock("call_7", "greet", `{"to":"you"}`),
	}, a.Blocks())
	require.False(t, a.Finished())
	require.Equal(t, messages.FinishReason{Kind: messages.FinishStop}, a.Finish(), "a missing finish defaults to stop")
	_, ok := a.Usage()
	require.False(t, ok)
}

// Scenario 6 (assembler.spec.ts): the first block-end wins; a duplicate
// close is ignored, and so are deltas after the close.
func TestFirstBlockEndWins(t *testing.T) {
	a := assemble(
		start(0, messages.BlockText),
		text(0, "draft"),
		end(0, messages.TextBlock("first")),
		end(0, messages.TextBlock("second")),
		text(0, " ignored"),
		start(0, messages.BlockText),
		finish(messages.FinishStop),
	)
	requireBlocks(t, []messages.ContentBlock{messages.TextBlock("first")}, a.Blocks())
}

// Scenario 7 (assembler.spec.ts): an open tool call assembles from its
// deltas; its id falls back to call-<index> and its name to "".
func TestAssemblesToolCallWithGeneratedIDFallback(t *testing.T) {
	a := assemble(
		start(3, messages.BlockToolCall),
		toolName(3, "", "read", `{"pa`),
		toolArgs(3, "", `th":"x"}`),
		toolArgs(5, "", `{}`),
	)
	requireBlocks(t, []messages.ContentBlock{
		messages.ToolCallBlock("call-3", "read", `{"path":"x"}`),
		messages.ToolCallBlock("call-5", "", `{}`),
	}, a.Blocks())

	// The first non-empty id and name win.
	a = assemble(toolArgs(0, "", "{"), toolName(0, "call_a", "", ""), toolName(0, "call_b", "f", "}"),
		toolName(0, "call_c", "g", ""))
	requireBlocks(t, []messages.ContentBlock{messages.ToolCallBlock("call_a", "f", "{}")}, a.Blocks())
}

// Scenario 8 (assembler.spec.ts): a max-tokens finish drops every tool
// call, open or closed, and the replay envelope's entries go with them.
func TestPrunesReplayEntriesWithDroppedToolCallsOnMaxTokens(t *testing.T) {
	replay := messages.MustParseJSON(`{"response":{"id":"r1"},"blocks":[{"b":0},{"b":1},{"b":2},{"b":3}],"v":2}`)
	a := assemble(
		start(0, messages.BlockReasoning), thinking(0, "plan"), end(0, messages.ReasoningBlock("plan")),
		start(1, messages.BlockToolCall), toolName(1, "c1", "ls", "{}"),
		end(1, messages.ToolCallBlock("c1", "ls", "{}")),
		start(2, messages.BlockText), text(2, "and then"),
		start(3, messages.BlockToolCall), toolName(3, "c2", "write", `{"con`),
		usage(5, 4096),
		messages.FinishChunk(messages.FinishReason{Kind: messages.FinishMaxTokens}, replay),
	)
	requireBlocks(t, []messages.ContentBlock{
		messages.ReasoningBlock("plan"),
		messages.TextBlock("and then"),
	}, a.Blocks())
	require.Equal(t, `{"response":{"id":"r1"},"blocks":[{"b":0},{"b":2}],"v":2}`, a.ReplayState().String())
	require.Equal(t, 4, a.NumBlocks())
	u, ok := a.Usage()
	require.True(t, ok)
	require.Equal(t, int64(4096), u.OutputTokens)

	// Without max-tokens, nothing is dropped and the envelope is kept as
	// it came.
	a = assemble(toolName(0, "c1", "ls", "{}"),
		messages.FinishChunk(messages.FinishReason{Kind: messages.FinishToolCalls},
			messages.MustParseJSON(`{"response":1,"blocks":["t"]}`)))
	require.Len(t, a.Blocks(), 1)
	require.Equal(t, `{"response":1,"blocks":["t"]}`, a.ReplayState().String())
}

// Scenario 9 (assembler.spec.ts): replay metadata whose per-block entries
// misalign with the blocks is omitted.
func TestOmitsMisalignedReplayMetadata(t *testing.T) {
	stream := func(rs string) *BlockAssembler {
		return assemble(text(0, "a"), thinking(1, "b"),
			messages.FinishChunk(messages.FinishReason{Kind: messages.FinishStop}, messages.MustParseJSON(rs)))
	}
	require.True(t, stream(`{"response":{},"blocks":[1,2,3]}`).ReplayState().IsZero(), "one entry too many")
	require.True(t, stream(`{"response":{},"blocks":[1]}`).ReplayState().IsZero(), "one entry too few")
	require.True(t, stream(`{"response":{},"blocks":{"0":1}}`).ReplayState().IsZero(), "blocks not an array")
	require.Equal(t, `{"response":{},"blocks":[1,2]}`, stream(`{"response":{},"blocks":[1,2]}`).ReplayState().String())
	require.Equal(t, `{"response":{}}`, stream(`{"response":{}}`).ReplayState().String(), "no blocks: kept")
	require.True(t, assemble(finish(messages.FinishStop)).ReplayState().IsZero(), "no envelope")
}

// Scenario 10 (assembler.spec.ts): interruptedBlocks drops tool calls
// whether open or closed, and whitespace-only blocks.
func TestInterruptedBlocksDropToolCallsAndWhitespace(t *testing.T) {
	a := assemble(
		start(0, messages.BlockReasoning), thinking(0, "closed thought"),
		end(0, messages.ReasoningBlock("closed thought")),
		start(1, messages.BlockText), text(1, " \n\t"), end(1, messages.TextBlock(" \n\t")),
		start(2, messages.BlockToolCall), toolName(2, "c1", "ls", "{}"),
		end(2, messages.ToolCallBlock("c1", "ls", "{}")),
		start(3, messages.BlockToolCall), toolName(3, "c2", "cat", `{"pa`),
		text(4, "partial answer"),
		thinking(5, "\u00a0\u3000\ufeff"), // whitespace to JavaScript's trim
		text(6, "\u0085"),                 // not whitespace to JavaScript
	)
	requireBlocks(t, []messages.ContentBlock{
		messages.ReasoningBlock("closed thought"),
		messages.TextBlock("partial answer"),
		messages.TextBlock("\u0085"),
	}, a.InterruptedBlocks())
	require.Nil(t, assemble(toolName(0, "c", "f", "{}")).InterruptedBlocks())
}

func TestAssemblerEdgeCases(t *testing.T) {
	t.Run("usage keeps the last value", func(t *testing.T) {
		a := assemble(usage(1, 2), usage(3, 4))
		u, ok := a.Usage()
		require.True(t, ok)
		require.Equal(t, messages.TokenUsage{InputTokens: 3, OutputTokens: 4}, u)
	})
	t.Run("chunks after the finish are ignored", func(t *testing.T) {
		a := assemble(text(0, "a"), failed(messages.FinishError, CodeServer, "x"), text(0, "b"), usage(1, 1),
			finish(messages.FinishStop))
		requireBlocks(t, []messages.ContentBlock{messages.TextBlock("a")}, a.Blocks())
		require.Equal(t, messages.FinishError, a.Finish().Kind)
		_, ok := a.Usage()
		require.False(t, ok)
	})
	t.Run("a block-end alone makes its block", func(t *testing.T) {
		a := assemble(text(1, "x"), end(0, messages.ReasoningBlock("r")), end(1, messages.TextBlock("y")))
		requireBlocks(t, []messages.ContentBlock{messages.TextBlock("y"), messages.ReasoningBlock("r")}, a.Blocks())
	})
	t.Run("deltas of the wrong type are ignored", func(t *testing.T) {
		a := assemble(text(0, "a"), thinking(0, "b"), toolArgs(0, "c", "d"), text(0, "e"))
		requireBlocks(t, []messages.ContentBlock{messages.TextBlock("ae")}, a.Blocks())
	})
	t.Run("an open block of another type is dropped, with its replay entry", func(t *testing.T) {
		a := assemble(start(0, messages.BlockImage), text(1, "a"),
			messages.FinishChunk(messages.FinishReason{Kind: messages.FinishStop}, messages.MustParseJSON(`{"blocks":[0,1]}`)))
		requireBlocks(t, []messages.ContentBlock{messages.TextBlock("a")}, a.Blocks())
		require.Equal(t, `{"blocks":[1]}`, a.ReplayState().String())
	})
	t.Run("an empty open block is kept", func(t *testing.T) {
		a := assemble(start(0, messages.BlockText), finish(messages.FinishStop))
		requireBlocks(t, []messages.ContentBlock{messages.TextBlock("")}, a.Blocks())
	})
	t.Run("no blocks", func(t *testing.T) {
		require.Nil(t, assemble(finish(messages.FinishStop)).Blocks())
	})
	t.Run("many blocks keep first-seen order", func(t *testing.T) {
		// Past linearLimit the lookup switches to a map; interleave so
		// that the last-block cache misses every time.
		var a BlockAssembler
		const n = 3 * linearLimit
		for round := range 3 {
			for i := range n {
				idx := (i * 7) % n // a permutation of 0..n-1
				a.Push(text(idx, fmt.Sprint(round)))
			}
		}
		got := a.Blocks()
		require.Len(t, got, n)
		for i, b := range got {
			require.Equal(t, "012", b.Text(), "block %d", i)
		}
		a.Push(end((1*7)%n, messages.TextBlock("closed")))
		require.Equal(t, "closed", a.Blocks()[1].Text())
	})
	t.Run("reset", func(t *testing.T) {
		a := assemble(text(0, "a"), usage(1, 1), failed(messages.FinishError, CodeServer, "x"))
		a.Reset()
		require.Nil(t, a.Blocks())
		require.False(t, a.Finished())
		_, ok := a.Usage()
		require.False(t, ok)
		a.Push(thinking(0, "b"))
		a.Push(finish(messages.FinishStop))
		requireBlocks(t, []messages.ContentBlock{messages.ReasoningBlock("b")}, a.Blocks())
	})
}

// realisticStream is a DeepSeek-like tool-calling step: reasoning deltas,
// text deltas, one tool call, deferred block-ends, usage, finish.
func realisticStream() []messages.StreamChunk {
	var cs []messages.StreamChunk
	cs = append(cs, start(0, messages.BlockReasoning))
	var reasoning, answer, args strings.Builder
	for i := range 400 {
		d := fmt.Sprintf(" tok%d", i%10)
		reasoning.WriteString(d)
		cs = append(cs, thinking(0, d))
	}
	cs = append(cs, start(1, messages.BlockText))
	for i := range 150 {
		d := fmt.Sprintf(" word%d", i%10)
		answer.WriteString(d)
		cs = append(cs, text(1, d))
	}
	cs = append(cs, start(2, messages.BlockToolCall), toolName(2, "call_00_abc", "write_file", ""))
	for i := range 50 {
		d := fmt.Sprintf(`"k%d":"v",`, i)
		args.WriteString(d)
		cs = append(cs, toolArgs(2, "call_00_abc", d))
	}
	cs = append(cs,
		end(0, messages.ReasoningBlock(reasoning.String())),
		end(1, messages.TextBlock(answer.String())),
		end(2, messages.ToolCallBlock("call_00_abc", "write_file", args.String())),
		usage(320, 640),
		finish(messages.FinishToolCalls))
	return cs
}

func TestRealisticStreamIsGrammatical(t *testing.T) {
	cs := realisticStream()
	require.NoError(t, checkStream(cs...))
	a := assemble(cs...)
	require.Len(t, a.Blocks(), 3)
	require.Equal(t, messages.FinishToolCalls, a.Finish().Kind)
}

// BenchmarkAssembler measures the per-chunk cost of assembling a realistic
// stream, end to end: every Push, then Blocks once.
func BenchmarkAssembler(b *testing.B) {
	cs := realisticStream()
	b.ReportAllocs()
	var a BlockAssembler
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	streams := 0
	for b.Loop() {
		a.Reset()
		for _, c := range cs {
			a.Push(c)
		}
		if len(a.Blocks()) != 3 {
			b.Fatal("wrong block count")
		}
		streams++
	}
	runtime.ReadMemStats(&ms1)
	n := float64(streams * len(cs))
	b.ReportMetric(n/b.Elapsed().Seconds(), "chunks/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/chunk")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/n, "allocs/chunk")
}
