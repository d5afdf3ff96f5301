package messages_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

// texts returns the JSON text of each block, for comparing block lists.
func texts(bs []messages.ContentBlock) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.JSON().String()
	}
	return out
}

// The id is minted at creation, the message is frozen, and the
// input is not aliased.
func TestAssignsIdentityImmediatelyAndReturnsDetachedFrozenMessage(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(content []messages.ContentBlock) messages.Message
	}{
		{"user", func(c []messages.ContentBlock) messages.Message {
			m, err := messages.NewUserMessage(c, messages.UserSource())
			require.NoError(t, err)
			return m
		}},
		{"assistant", func(c []messages.ContentBlock) messages.Message {
			m, err := messages.NewAssistantMessage(c, messages.ModelSource{Provider: "p", Model: "m"})
			require.NoError(t, err)
			return m
		}},
		{"tool result", func(c []messages.ContentBlock) messages.Message {
			return messages.NewToolResultMessage("call-1", c, messages.ToolSucceeded)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nested := []messages.ContentBlock{messages.TextBlock("nested")}
			content := []messages.ContentBlock{
				messages.TextBlock("hello"),
				messages.ToolResultBlock("c0", nested, messages.ToolFailed),
			}
			m := tc.make(content)

			id, err := uuid.Parse(string(m.ID()))
			require.NoError(t, err, "the id is a UUID")
			require.Equal(t, uuid.Version(4), id.Version())
			idField, ok := m.JSON().Field("id")
			require.True(t, ok)
			require.Equal(t, messages.JSONString(string(m.ID())), idField)

			before := m.JSON().String()
			wantBlocks := texts(m.Content())

			// Mutate every input the caller still holds.
			content[0] = messages.TextBlock("changed")
			content[1] = messages.TextBlock("changed too")
			nested[0] = messages.TextBlock("changed nested")

			require.Equal(t, before, m.JSON().String())
			require.Equal(t, wantBlocks, texts(m.Content()))

			// Fresh ids on every call.
			seen := map[messages.MessageID]bool{m.ID(): true}
			for range 1000 {
				id := tc.make(nil).ID()
				require.False(t, seen[id], "id %s minted twice", id)
				seen[id] = true
			}
		})
	}
	t.Run("nested content of the block", func(t *testing.T) {
		nested := []messages.ContentBlock{messages.TextBlock("a")}
		b := messages.ToolResultBlock("c", nested, messages.ToolSucceeded)
		m, err := messages.NewUserMessage([]messages.ContentBlock{b}, messages.UserSource())
		require.NoError(t, err)
		before := m.JSON().String()
		nested[0] = messages.TextBlock("b")
		require.Equal(t, before, m.JSON().String())
		require.Equal(t, `{"type":"text","text":"a"}`, m.Block(0).Content()[0].JSON().String())
	})
}

// ImportMessage keeps the id it is given.
func TestFreezesExistingIdentityWithoutMintingReplacement(t *testing.T) {
	const in = `{"id":"msg-1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}`
	raw := []byte(in)
	j, err := messages.ParseJSON(raw)
	require.NoError(t, err)
	m, err := messages.ImportMessage(j)
	require.NoError(t, err)
	require.Equal(t, messages.MessageID("msg-1"), m.ID())
	require.Equal(t, in, m.JSON().String())

	again, err := messages.ImportMessage(m.JSON())
	require.NoError(t, err)
	require.Equal(t, m.ID(), again.ID())
	require.True(t, m.Equal(again))

	// Rewriting the content keeps the identity too (docs/architecture.md#values).
	r := m.WithContent([]messages.ContentBlock{messages.TextBlock("rewritten")})
	require.Equal(t, m.ID(), r.ID())

	copy(raw, `{"id":"XXX-X"`)
	require.Equal(t, messages.MessageID("msg-1"), m.ID())
	require.Equal(t, in, m.JSON().String())
}

// An assistant message always has role assistant and a model
// source; the caller cannot choose either.
func TestFixesAssistantRoleAndModelSourceKind(t *testing.T) {
	for _, tc := range []struct {
		name    string
		src     messages.ModelSource
		wantSrc string
	}{
		{"plain", messages.ModelSource{Provider: "deepseek", Model: "deepseek-chat"},
			`{"kind":"model","provider":"deepseek","model":"deepseek-chat"}`},
		{"with replay state", messages.ModelSource{Provider: "p", Model: "m",
			ReplayState: messages.MustParseJSON(`{"response":{"id":"r1"},"blocks":[null]}`)},
			`{"kind":"model","provider":"p","model":"m","replayState":{"response":{"id":"r1"},"blocks":[null]}}`},
		{"null replay state is kept", messages.ModelSource{Provider: "p", Model: "m", ReplayState: messages.JSONNull},
			`{"kind":"model","provider":"p","model":"m","replayState":null}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := messages.NewAssistantMessage([]messages.ContentBlock{messages.TextBlock("answer")}, tc.src)
			require.NoError(t, err)
			require.Equal(t, messages.RoleAssistant, m.Role())
			require.Equal(t, messages.SourceModel, m.Source().Kind())
			require.Equal(t, tc.src.Provider, m.Source().Provider())
			require.Equal(t, tc.src.Model, m.Source().Model())
			require.Equal(t, tc.src.ReplayState, m.Source().ReplayState())
			require.Equal(t, tc.wantSrc, m.Source().JSON().String())
			role, _ := m.JSON().Field("role")
			require.Equal(t, `"assistant"`, role.String())

			imported, err := messages.ImportMessage(m.JSON())
			require.NoError(t, err)
			require.Equal(t, m.JSON(), imported.JSON())
			require.Equal(t, m.Source().ReplayState(), imported.Source().ReplayState())
		})
	}
	for name, src := range map[string]messages.ModelSource{
		"no provider": {Model: "m"},
		"no model":    {Provider: "p"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := messages.NewAssistantMessage(nil, src)
			require.Error(t, err)
		})
	}
}

// A tool result is a user message with source tool{callId} and
// exactly one tool-result block answering the same call.
func TestCouplesToolResultContentToOneCallIdentity(t *testing.T) {
	for _, tc := range []struct {
		name    string
		callID  string
		content []messages.ContentBlock
		isError bool
		want    string
	}{
		{"ok", "call-1", []messages.ContentBlock{messages.TextBlock("out")}, false,
			`[{"type":"tool-result","toolCallId":"call-1","content":[{"type":"text","text":"out"}],"isError":false}]`},
		{"error", "call-2", []messages.ContentBlock{messages.TextBlock("boom")}, true,
			`[{"type":"tool-result","toolCallId":"call-2","content":[{"type":"text","text":"boom"}],"isError":true}]`},
		{"no content", "call-3", nil, false,
			`[{"type":"tool-result","toolCallId":"call-3","content":[],"isError":false}]`},
		{"several blocks", "c", []messages.ContentBlock{messages.TextBlock("a"), messages.TextBlock("b")}, false,
			`[{"type":"tool-result","toolCallId":"c","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"isError":false}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := messages.NewToolResultMessage(tc.callID, tc.content, messages.ToolOutcome(tc.isError))
			require.Equal(t, messages.RoleUser, m.Role())
			require.Equal(t, messages.SourceTool, m.Source().Kind())
			require.Equal(t, tc.callID, m.Source().CallID())
			require.Equal(t, 1, m.NumBlocks())
			b := m.Block(0)
			require.Equal(t, messages.BlockToolResult, b.Type())
			require.Equal(t, m.Source().CallID(), b.ToolCallID())
			require.Equal(t, tc.isError, b.IsError())
			require.Equal(t, texts(tc.content), texts(b.Content()))
			c, _ := m.JSON().Field("content")
			require.Equal(t, tc.want, c.String())

			imported, err := messages.ImportMessage(m.JSON())
			require.NoError(t, err)
			require.Equal(t, m.JSON(), imported.JSON())
			require.Equal(t, tc.isError, imported.Block(0).IsError())
		})
	}
}

func TestNewUserMessageSources(t *testing.T) {
	plugin, err := messages.PluginSource("p", messages.MustParseJSON(`{"form":"notice","summary":"s"}`))
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		src  messages.Source
		ok   bool
	}{
		{"user", messages.UserSource(), true},
		{"plugin", plugin, true},
		{"zero", messages.Source{}, false},
		{"tool", messages.ToolSource("c"), false},
		{"model", mustSource(t, `{"kind":"model","provider":"p","model":"m"}`), false},
		{"foreign kind", mustSource(t, `{"kind":"agent-instructions"}`), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("x")}, tc.src)
			if !tc.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, messages.RoleUser, m.Role())
			require.Equal(t, tc.src.JSON(), m.Source().JSON())
		})
	}
}

// A zero ContentBlock is no block: it must not turn into a null that
// ImportMessage would refuse.
func TestZeroBlocksAreLeftOut(t *testing.T) {
	zero := messages.ContentBlock{}
	require.True(t, zero.IsZero())
	require.False(t, messages.TextBlock("").IsZero())
	text := messages.TextBlock("t")

	m, err := messages.NewUserMessage([]messages.ContentBlock{zero, text, zero}, messages.UserSource())
	require.NoError(t, err)
	require.Equal(t, 1, m.NumBlocks())
	_, err = messages.ImportMessage(m.JSON())
	require.NoError(t, err)

	tr := messages.NewToolResultMessage("c", []messages.ContentBlock{zero}, messages.ToolSucceeded)
	require.Empty(t, tr.Block(0).Content())
	_, err = messages.ImportMessage(tr.JSON())
	require.NoError(t, err)

	w := m.WithContent([]messages.ContentBlock{zero})
	require.Equal(t, 0, w.NumBlocks())
	_, err = messages.ImportMessage(w.JSON())
	require.NoError(t, err)
}

func TestImportMessage(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		ok       bool
	}{
		{"user", `{"id":"a","role":"user","content":[],"source":{"kind":"user"}}`, true},
		{"assistant", `{"id":"a","role":"assistant","content":[{"type":"reasoning","text":"r"}],"source":{"kind":"model","provider":"p","model":"m"}}`, true},
		{"any member order, extra members kept", `{"meta":{"x":[1.0]},"source":{"kind":"user","extra":true},"content":[{"type":"text","text":"t","cache":1}],"role":"user","id":"a","z":null}`, true},
		{"foreign source kind", `{"id":"a","role":"user","content":[],"source":{"kind":"subagent-report","report":"r"}}`, true},
		{"unknown block type", `{"id":"a","role":"user","content":[{"type":"audio","data":"x"}],"source":{"kind":"user"}}`, true},
		{"not an object", `[]`, false},
		{"missing id", `{"role":"user","content":[],"source":{"kind":"user"}}`, false},
		{"empty id", `{"id":"","role":"user","content":[],"source":{"kind":"user"}}`, false},
		{"numeric id", `{"id":1,"role":"user","content":[],"source":{"kind":"user"}}`, false},
		{"missing role", `{"id":"a","content":[],"source":{"kind":"user"}}`, false},
		{"system role", `{"id":"a","role":"system","content":[],"source":{"kind":"user"}}`, false},
		{"unknown role", `{"id":"a","role":"tool","content":[],"source":{"kind":"user"}}`, false},
		{"missing content", `{"id":"a","role":"user","source":{"kind":"user"}}`, false},
		{"content not an array", `{"id":"a","role":"user","content":"hi","source":{"kind":"user"}}`, false},
		{"bad block", `{"id":"a","role":"user","content":[{"type":"text"}],"source":{"kind":"user"}}`, false},
		{"null block", `{"id":"a","role":"user","content":[null],"source":{"kind":"user"}}`, false},
		{"missing source", `{"id":"a","role":"user","content":[]}`, false},
		{"bad source", `{"id":"a","role":"user","content":[],"source":{"kind":"model"}}`, false},
		{"source not an object", `{"id":"a","role":"user","content":[],"source":"user"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := messages.ImportMessage(messages.MustParseJSON(tc.in))
			if !tc.ok {
				require.Error(t, err)
				require.True(t, m.IsZero())
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.in, m.JSON().String(), "kept verbatim")
			out, err := m.MarshalJSON()
			require.NoError(t, err)
			require.Equal(t, tc.in, string(out))
			require.Equal(t, messages.MessageID("a"), m.ID())
			require.False(t, m.IsZero())
		})
	}
	_, err := messages.ImportMessage(messages.JSON{})
	require.Error(t, err)
}

func TestMessageGetters(t *testing.T) {
	m, err := messages.ImportMessage(messages.MustParseJSON(`{"id":"a","role":"assistant","content":[` +
		`{"type":"text","text":"t"},{"type":"tool-call","id":"c1","name":"bash","arguments":"{\"cmd\":1}"}],` +
		`"source":{"kind":"model","provider":"p","model":"m"}}`))
	require.NoError(t, err)
	require.Equal(t, 2, m.NumBlocks())
	var types []messages.BlockType
	for b := range m.Blocks() {
		types = append(types, b.Type())
	}
	require.Equal(t, []messages.BlockType{messages.BlockText, messages.BlockToolCall}, types)
	call := m.Block(1)
	require.Equal(t, "c1", call.ID())
	require.Equal(t, "bash", call.Name())
	require.Equal(t, `{"cmd":1}`, call.Arguments())
	require.True(t, m.Equal(m))
	require.True(t, messages.Message{}.IsZero())
}

func TestMessageWithContent(t *testing.T) {
	const in = `{"meta":1,"id":"keep","content":[{"type":"text","text":"old"}],"role":"user","source":{"kind":"plugin","plugin":"p","form":"snapshot"},"z":"\u00e9"}`
	m, err := messages.ImportMessage(messages.MustParseJSON(in))
	require.NoError(t, err)
	blocks := []messages.ContentBlock{messages.TextBlock("new")}
	r := m.WithContent(blocks)
	blocks[0] = messages.TextBlock("mutated")

	require.Equal(t, m.ID(), r.ID())
	require.Equal(t, m.Role(), r.Role())
	require.Equal(t, m.Source().JSON(), r.Source().JSON())
	require.Equal(t, `{"meta":1,"id":"keep","content":[{"type":"text","text":"new"}],"role":"user","source":{"kind":"plugin","plugin":"p","form":"snapshot"},"z":"\u00e9"}`,
		r.JSON().String(), "only the content changes")
	require.Equal(t, in, m.JSON().String(), "the original is untouched")

	back, err := messages.ImportMessage(r.JSON())
	require.NoError(t, err)
	require.Equal(t, r.JSON(), back.JSON())
	require.Equal(t, []string{`{"type":"text","text":"new"}`}, texts(back.Content()))

	fresh := messages.NewToolResultMessage("c", nil, messages.ToolSucceeded).WithContent([]messages.ContentBlock{messages.TextBlock("x")})
	require.Equal(t, 1, fresh.NumBlocks())
	require.Equal(t, "c", fresh.Source().CallID())
}

func FuzzImportMessage(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}`,
		`{"id":"a","role":"assistant","content":[{"type":"tool-call","id":"c","name":"n","arguments":"{}"}],"source":{"kind":"model","provider":"p","model":"m","replayState":{}}}`,
		`{"id":"a","role":"user","content":[{"type":"tool-result","toolCallId":"c","content":[{"type":"image","attachment":{}}],"isError":true}],"source":{"kind":"tool","callId":"c"}}`,
		`{"id":"a","role":"user","content":[],"source":{"kind":"plugin","plugin":"p","form":"notice"},"x":1}`,
		`{"id":"a","role":"system","content":[],"source":{"kind":"user"}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		j, err := messages.ParseJSONString(s)
		if err != nil {
			return
		}
		m, err := messages.ImportMessage(j)
		if err != nil {
			require.True(t, m.IsZero())
			return
		}
		require.Equal(t, j, m.JSON())
		again, err := messages.ImportMessage(m.JSON())
		require.NoError(t, err)
		require.Equal(t, m.JSON(), again.JSON())
		for b := range m.Blocks() {
			p, err := messages.ParseContentBlock(b.JSON())
			require.NoError(t, err)
			require.Equal(t, b.JSON(), p.JSON())
		}
		r := m.WithContent(m.Content())
		require.True(t, r.Equal(m))
		_, err = messages.ImportMessage(r.JSON())
		require.NoError(t, err)
	})
}
