package messages_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

func TestContentBlockConstructors(t *testing.T) {
	img, err := messages.ImageBlock(messages.MustParseJSON(`{"attachmentId":"sha256:ab","mediaType":"image/png","bytes":69}`))
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		block messages.ContentBlock
		want  string
	}{
		{"text", messages.TextBlock("hi\n"), `{"type":"text","text":"hi\n"}`},
		{"reasoning", messages.ReasoningBlock("hmm"), `{"type":"reasoning","text":"hmm"}`},
		{"tool-call", messages.ToolCallBlock("c1", "bash", `{"cmd":"ls"`), `{"type":"tool-call","id":"c1","name":"bash","arguments":"{\"cmd\":\"ls\""}`},
		{"tool-result", messages.ToolResultBlock("c1", []messages.ContentBlock{messages.TextBlock("x")}, messages.ToolFailed),
			`{"type":"tool-result","toolCallId":"c1","content":[{"type":"text","text":"x"}],"isError":true}`},
		{"image", img, `{"type":"image","attachment":{"attachmentId":"sha256:ab","mediaType":"image/png","bytes":69}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.block.JSON().String())
			parsed, err := messages.ParseContentBlock(tc.block.JSON())
			require.NoError(t, err)
			require.Equal(t, tc.block.JSON(), parsed.JSON())
			require.True(t, parsed.Equal(tc.block))
			require.Equal(t, tc.block.Type(), parsed.Type())
			require.Equal(t, tc.block.Text(), parsed.Text())
			require.Equal(t, tc.block.ID(), parsed.ID())
			require.Equal(t, tc.block.Name(), parsed.Name())
			require.Equal(t, tc.block.Arguments(), parsed.Arguments())
			require.Equal(t, tc.block.ToolCallID(), parsed.ToolCallID())
			require.Equal(t, tc.block.IsError(), parsed.IsError())
			require.Equal(t, tc.block.Attachment(), parsed.Attachment())
			require.Equal(t, texts(tc.block.Content()), texts(parsed.Content()))
			out, err := tc.block.MarshalJSON()
			require.NoError(t, err)
			require.Equal(t, tc.want, string(out))
		})
	}
	_, err = messages.ImageBlock(messages.MustParseJSON(`"ref"`))
	require.Error(t, err)
	_, err = messages.ImageBlock(messages.JSON{})
	require.Error(t, err)
}

func TestParseContentBlock(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		ok       bool
		check    func(t *testing.T, b messages.ContentBlock)
	}{
		{"text", `{"type":"text","text":"a"}`, true, func(t *testing.T, b messages.ContentBlock) {
			require.Equal(t, messages.BlockText, b.Type())
			require.Equal(t, "a", b.Text())
		}},
		{"text with escapes", `{"text":"\u00e9\n","type":"text"}`, true, func(t *testing.T, b messages.ContentBlock) {
			require.Equal(t, "é\n", b.Text())
		}},
		{"reasoning", `{"type":"reasoning","text":""}`, true, func(t *testing.T, b messages.ContentBlock) {
			require.Equal(t, messages.BlockReasoning, b.Type())
		}},
		{"tool-call", `{"type":"tool-call","id":"c","name":"n","arguments":"not json {"}`, true, func(t *testing.T, b messages.ContentBlock) {
			require.Equal(t, "not json {", b.Arguments(), "arguments are never parsed")
		}},
		{"tool-result without isError", `{"type":"tool-result","toolCallId":"c","content":[]}`, true, func(t *testing.T, b messages.ContentBlock) {
			require.False(t, b.IsError())
			_, has := b.JSON().Field("isError")
			require.False(t, has, "an absent isError stays absent")
		}},
		{"tool-result nested", `{"type":"tool-result","toolCallId":"c","content":[{"type":"tool-result","toolCallId":"d","content":[{"type":"text","text":"deep"}],"isError":true}],"isError":false}`, true,
			func(t *testing.T, b messages.ContentBlock) {
				inner := b.Content()[0]
				require.Equal(t, "d", inner.ToolCallID())
				require.True(t, inner.IsError())
				require.Equal(t, "deep", inner.Content()[0].Text())
				n := 0
				for nb := range b.NestedBlocks() {
					require.Equal(t, inner.JSON(), nb.JSON())
					n++
				}
				require.Equal(t, 1, n)
			}},
		{"image", `{"type":"image","attachment":{"attachmentId":"x"}}`, true, func(t *testing.T, b messages.ContentBlock) {
			require.Equal(t, `{"attachmentId":"x"}`, b.Attachment().String())
		}},
		{"unknown type kept verbatim", `{"type":"audio","data":{"b":1.0,"a":[]},"x":"\u00e9"}`, true, func(t *testing.T, b messages.ContentBlock) {
			require.Equal(t, messages.BlockType("audio"), b.Type())
		}},
		{"extra members kept", `{"type":"text","text":"t","cache_control":{"type":"ephemeral"}}`, true, nil},

		{"not an object", `"text"`, false, nil},
		{"no type", `{"text":"a"}`, false, nil},
		{"empty type", `{"type":"","text":"a"}`, false, nil},
		{"type not a string", `{"type":1}`, false, nil},
		{"text without text", `{"type":"text"}`, false, nil},
		{"text not a string", `{"type":"text","text":1}`, false, nil},
		{"reasoning without text", `{"type":"reasoning"}`, false, nil},
		{"tool-call without id", `{"type":"tool-call","name":"n","arguments":""}`, false, nil},
		{"tool-call without name", `{"type":"tool-call","id":"c","arguments":""}`, false, nil},
		{"tool-call without arguments", `{"type":"tool-call","id":"c","name":"n"}`, false, nil},
		{"tool-call object arguments", `{"type":"tool-call","id":"c","name":"n","arguments":{}}`, false, nil},
		{"tool-result without toolCallId", `{"type":"tool-result","content":[]}`, false, nil},
		{"tool-result without content", `{"type":"tool-result","toolCallId":"c"}`, false, nil},
		{"tool-result content not array", `{"type":"tool-result","toolCallId":"c","content":"x"}`, false, nil},
		{"tool-result bad nested", `{"type":"tool-result","toolCallId":"c","content":[{"type":"text"}]}`, false, nil},
		{"tool-result isError not bool", `{"type":"tool-result","toolCallId":"c","content":[],"isError":"yes"}`, false, nil},
		{"image without attachment", `{"type":"image"}`, false, nil},
		{"image attachment not object", `{"type":"image","attachment":"x"}`, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := messages.ParseContentBlock(messages.MustParseJSON(tc.in))
			if !tc.ok {
				require.Error(t, err)
				require.True(t, b.IsZero())
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.in, b.JSON().String())
			if tc.check != nil {
				tc.check(t, b)
			}
		})
	}
}

func TestContentBlockWithNestedContent(t *testing.T) {
	const in = `{"meta":{"pruned":false},"type":"tool-result","toolCallId":"c","content":[{"type":"text","text":"long"}]}`
	b, err := messages.ParseContentBlock(messages.MustParseJSON(in))
	require.NoError(t, err)
	repl := []messages.ContentBlock{messages.TextBlock("[pruned]")}
	n, err := b.WithNestedContent(repl)
	require.NoError(t, err)
	repl[0] = messages.TextBlock("mutated")

	require.Equal(t, `{"meta":{"pruned":false},"type":"tool-result","toolCallId":"c","content":[{"type":"text","text":"[pruned]"}]}`,
		n.JSON().String(), "everything but the content is kept, isError stays absent")
	require.Equal(t, "c", n.ToolCallID())
	require.Equal(t, []string{`{"type":"text","text":"[pruned]"}`}, texts(n.Content()))
	require.Equal(t, in, b.JSON().String(), "the original is untouched")
	back, err := messages.ParseContentBlock(n.JSON())
	require.NoError(t, err)
	require.Equal(t, n.JSON(), back.JSON())

	e, err := messages.ToolResultBlock("c", nil, messages.ToolFailed).WithNestedContent(nil)
	require.NoError(t, err)
	require.Equal(t, `{"type":"tool-result","toolCallId":"c","content":[],"isError":true}`, e.JSON().String())

	for _, other := range []messages.ContentBlock{messages.TextBlock("t"), messages.ToolCallBlock("c", "n", "")} {
		_, err := other.WithNestedContent(nil)
		require.Error(t, err)
	}
}
