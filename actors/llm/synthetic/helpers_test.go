package synthetic

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/messages"
)

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var testConfig = messages.CallConfig{Provider: "synthetic", Model: "synthetic-1"}

func userMsg(t testing.TB, text string) messages.Message {
	t.Helper()
	m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(text)}, messages.UserSource())
	require.NoError(t, err)
	return m
}

func pluginMsg(t testing.TB, text string) messages.Message {
	t.Helper()
	src, err := messages.PluginSource("context", messages.JSON{})
	require.NoError(t, err)
	m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(text)}, src)
	require.NoError(t, err)
	return m
}

func toolCallMsg(t testing.TB, id string) messages.Message {
	t.Helper()
	m, err := messages.NewAssistantMessage([]messages.ContentBlock{messages.ToolCallBlock(id, "synthetic_echo", `{}`)},
		messages.ModelSource{Provider: "synthetic", Model: "synthetic-1"})
	require.NoError(t, err)
	return m
}

// request returns a one-message request in session sid.
func request(t testing.TB, sid, prompt string) llm.Request {
	return llm.NewRequest(testConfig, "system", []messages.Message{userMsg(t, prompt)}, nil).WithSession(sid)
}

// result is one stream read to its end.
type result struct {
	chunks []messages.StreamChunk
	err    error
}

// texts returns the chunk JSON texts.
func (r result) texts() []string {
	out := make([]string, len(r.chunks))
	for i, c := range r.chunks {
		out[i] = c.JSON().String()
	}
	return out
}

func (r result) finish() (messages.FinishReason, bool) {
	if n := len(r.chunks); n > 0 && r.chunks[n-1].Type() == messages.ChunkFinish {
		return r.chunks[n-1].Reason(), true
	}
	return messages.FinishReason{}, false
}

func (r result) has(bt messages.BlockType) bool {
	for _, c := range r.chunks {
		if c.Type() == messages.ChunkBlockStart && c.BlockType() == bt {
			return true
		}
	}
	return false
}

func (r result) deltas(ct messages.ChunkType) int {
	n := 0
	for _, c := range r.chunks {
		if c.Type() == ct {
			n++
		}
	}
	return n
}

// collect reads a whole stream. It fails the test if the iterator yields
// anything after an error.
func collect(t testing.TB, p llm.Provider, ctx context.Context, req llm.Request) result {
	t.Helper()
	var r result
	for c, err := range p.Stream(ctx, req) {
		require.NoError(t, r.err, "the stream went on after its error")
		if err != nil {
			r.err = err
			continue
		}
		r.chunks = append(r.chunks, c)
	}
	return r
}

func newProvider(t testing.TB, cfg Config) *Provider {
	t.Helper()
	p, err := New(cfg)
	require.NoError(t, err)
	return p
}

// checkGrammar checks a complete stream against the chunk grammar
// (docs/messages.md#stream-chunks) and the DeepSeek emission order the
// synthetic provider imitates: reasoning (if any) is block 0 and opens first;
// deltas stream with every block open; then every block-end in index order,
// the usage, the finish. It also checks that each block-end carries what its
// deltas assembled and that the usage counts the deltas.
func checkGrammar(r result) error {
	type open struct {
		typ  messages.BlockType
		text strings.Builder
		id   string
		name string
	}
	blocks := map[int]*open{}
	var order []int
	closed := map[int]bool{}
	var usage *messages.TokenUsage
	finished := false
	tail := false
	deltas, reasoning := 0, 0
	for i, c := range r.chunks {
		if finished {
			return fmt.Errorf("chunk %d after the finish", i)
		}
		if c.Index() < 0 {
			return fmt.Errorf("chunk %d: negative index", i)
		}
		switch c.Type() {
		case messages.ChunkBlockStart:
			if tail {
				return fmt.Errorf("chunk %d: block-start after the tail began", i)
			}
			if _, ok := blocks[c.Index()]; ok {
				return fmt.Errorf("chunk %d: block %d started twice", i, c.Index())
			}
			if c.BlockType() == messages.BlockReasoning && (c.Index() != 0 || len(order) != 0) {
				return fmt.Errorf("chunk %d: reasoning is not the first block", i)
			}
			blocks[c.Index()] = &open{typ: c.BlockType()}
			order = append(order, c.Index())
		case messages.ChunkTextDelta, messages.ChunkReasoningDelta, messages.ChunkToolCallDelta:
			if tail {
				return fmt.Errorf("chunk %d: delta after the tail began", i)
			}
			b, ok := blocks[c.Index()]
			if !ok || closed[c.Index()] {
				return fmt.Errorf("chunk %d: delta for block %d, which is not open", i, c.Index())
			}
			want := map[messages.ChunkType]messages.BlockType{
				messages.ChunkTextDelta:      messages.BlockText,
				messages.ChunkReasoningDelta: messages.BlockReasoning,
				messages.ChunkToolCallDelta:  messages.BlockToolCall,
			}[c.Type()]
			if b.typ != want {
				return fmt.Errorf("chunk %d: %s for a %s block", i, c.Type(), b.typ)
			}
			if !c.IsTokenDelta() {
				return fmt.Errorf("chunk %d: empty delta", i)
			}
			deltas++
			if c.Type() == messages.ChunkReasoningDelta {
				reasoning++
			}
			if c.Type() == messages.ChunkToolCallDelta {
				if b.id == "" {
					b.id = c.CallID()
					name, ok := c.Name()
					if !ok || name == "" {
						return fmt.Errorf("chunk %d: first tool-call delta without a name", i)
					}
					b.name = name
				} else if c.CallID() != b.id {
					return fmt.Errorf("chunk %d: call id changed", i)
				}
				b.text.WriteString(c.ArgumentsDelta())
			} else {
				b.text.WriteString(c.Text())
			}
		case messages.ChunkBlockEnd:
			tail = true
			b, ok := blocks[c.Index()]
			if !ok || closed[c.Index()] {
				return fmt.Errorf("chunk %d: block-end for block %d, which is not open", i, c.Index())
			}
			if len(closed) >= len(order) || order[len(closed)] != c.Index() {
				return fmt.Errorf("chunk %d: block-end %d out of index order", i, c.Index())
			}
			closed[c.Index()] = true
			blk := c.Block()
			if blk.Type() != b.typ {
				return fmt.Errorf("chunk %d: block-end type %s closes a %s block", i, blk.Type(), b.typ)
			}
			switch b.typ {
			case messages.BlockToolCall:
				if blk.ID() != b.id || blk.Name() != b.name || blk.Arguments() != b.text.String() {
					return fmt.Errorf("chunk %d: tool-call block-end %s differs from its deltas", i, blk.JSON())
				}
			default:
				if blk.Text() != b.text.String() {
					return fmt.Errorf("chunk %d: block-end text differs from its deltas", i)
				}
			}
		case messages.ChunkUsage:
			tail = true
			if usage != nil {
				return fmt.Errorf("chunk %d: second usage", i)
			}
			if len(closed) != len(order) {
				return fmt.Errorf("chunk %d: usage before every block-end", i)
			}
			u := c.Usage()
			usage = &u
		case messages.ChunkFinish:
			finished = true
			reason := c.Reason()
			if len(closed) != len(order) && reason.Kind != messages.FinishError && reason.Kind != messages.FinishAborted {
				return fmt.Errorf("chunk %d: %s finish with open blocks", i, reason.Kind)
			}
			hasTool := false
			for _, b := range blocks {
				hasTool = hasTool || b.typ == messages.BlockToolCall
			}
			switch {
			case reason.Kind == messages.FinishMaxTokens:
			case hasTool && reason.Kind != messages.FinishToolCalls:
				return fmt.Errorf("chunk %d: tool calls finished with %s", i, reason.Kind)
			case !hasTool && reason.Kind != messages.FinishStop:
				return fmt.Errorf("chunk %d: text finished with %s", i, reason.Kind)
			}
		default:
			return fmt.Errorf("chunk %d: unknown type %s", i, c.Type())
		}
	}
	if r.err != nil {
		return nil // a failed stream: the grammar of its prefix is all there is
	}
	if !finished {
		return fmt.Errorf("no finish")
	}
	if usage == nil {
		return fmt.Errorf("no usage")
	}
	if usage.OutputTokens != int64(deltas) {
		return fmt.Errorf("usage outputTokens %d, deltas %d", usage.OutputTokens, deltas)
	}
	if rt, ok := usage.ReasoningTokens.Get(); ok != (reasoning > 0) || rt != int64(reasoning) {
		return fmt.Errorf("usage reasoningTokens %d (%v), reasoning deltas %d", rt, ok, reasoning)
	}
	if usage.InputTokens <= 0 {
		return fmt.Errorf("usage inputTokens %d", usage.InputTokens)
	}
	return nil
}
