package deepseek

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/messages"
)

// emptyParameters stands in for a tool without a parameter schema: some
// servers refuse a function whose parameters are missing or not an object
// schema.
var emptyParameters = json.RawMessage(`{"type":"object","properties":{}}`)

// requestBody builds the chat-completions body for req. Its errors are
// about the request (an image that cannot be resolved, a value that does
// not encode) and never quote the API key, which is not in the body.
func (p *Provider) requestBody(req llm.Request) ([]byte, error) {
	cfg := req.Config()
	w := wireRequest{
		Model:           cfg.Model,
		Stream:          true,
		StreamOptions:   wireStreamOptions{IncludeUsage: true},
		Stop:            cfg.Stop(),
		ReasoningEffort: cfg.ReasoningEffort,
	}
	if w.Model == "" {
		w.Model = p.cfg.Model
	}
	if v, ok := cfg.MaxTokens.Get(); ok {
		w.MaxTokens = &v
	}
	if v, ok := cfg.Temperature.Get(); ok {
		w.Temperature = &v
	}
	for _, t := range req.Tools() {
		params := json.RawMessage(t.Parameters.String())
		if t.Parameters.IsZero() {
			params = emptyParameters
		}
		w.Tools = append(w.Tools, wireTool{Type: "function",
			Function: wireFunction{Name: t.Name, Description: t.Description, Parameters: params}})
	}
	msgs, err := p.wireMessages(req)
	if err != nil {
		return nil, err
	}
	w.Messages = msgs
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // "<" stays "<", as every other client sends it
	if err := enc.Encode(w); err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// wireMessages maps the history (and the system prompt, first).
//
// Roles: a user message becomes role "user" (text blocks, and image
// blocks as image_url parts); each tool-result block becomes its own role
// "tool" message with tool_call_id, placed before any other content of
// the same message so that it directly follows the assistant's calls; an
// assistant message becomes role "assistant" with its text as content and
// its tool-call blocks as tool_calls.
//
// reasoning_content round trip. DeepSeek's thinking mode requires the
// reasoning of every assistant message in a "turn that made tool calls"
// to be sent back in all later requests, or it answers 400 ("The
// reasoning_content in the thinking mode must be passed back to the
// API"); for other turns it ignores the field, and the older R1 models
// refused it outright. So: the history is cut into turns at each user
// message that is not only tool results; in a turn where some assistant
// message has a tool call, every assistant message of that turn (the
// calls and the final answer) carries reasoning_content, the text of its
// reasoning blocks; in any other turn no assistant message carries it. A
// message with no reasoning text gets no field (an empty string proves
// nothing to the server, and plain OpenAI-compatible servers, whose
// messages never have reasoning, then never see the field at all).
func (p *Provider) wireMessages(req llm.Request) ([]wireMessage, error) {
	var out []wireMessage
	if s := req.System(); s != "" {
		out = append(out, wireMessage{Role: "system", Content: jsonString(s)})
	}
	toolTurn := toolCallTurns(req)
	for i, m := range req.Messages() {
		switch m.Role() {
		case messages.RoleAssistant:
			out = append(out, assistantMessage(m, toolTurn[i]))
		default:
			ms, err := p.userMessages(m)
			if err != nil {
				return nil, fmt.Errorf("message %s: %w", m.ID(), err)
			}
			out = append(out, ms...)
		}
	}
	return out, nil
}

// toolCallTurns reports, for each message index, whether the message
// belongs to a turn in which an assistant message made a tool call.
func toolCallTurns(req llm.Request) []bool {
	n := req.NumMessages()
	in := make([]bool, n)
	start := 0
	flush := func(end int) {
		has := false
		for j := start; j < end && !has; j++ {
			m := req.Message(j)
			if m.Role() != messages.RoleAssistant {
				continue
			}
			for b := range m.Blocks() {
				if b.Type() == messages.BlockToolCall {
					has = true
					break
				}
			}
		}
		for j := start; j < end; j++ {
			in[j] = has
		}
	}
	for i, m := range req.Messages() {
		if m.Role() == messages.RoleUser && startsTurn(m) {
			flush(i)
			start = i
		}
	}
	flush(n)
	return in
}

// startsTurn reports whether a user-role message is a real user input (it
// has a block other than a tool result), as opposed to tool results.
func startsTurn(m messages.Message) bool {
	for b := range m.Blocks() {
		if b.Type() != messages.BlockToolResult {
			return true
		}
	}
	return m.NumBlocks() == 0
}

func assistantMessage(m messages.Message, inToolTurn bool) wireMessage {
	var text, reasoning []string
	var calls []wireToolCall
	for b := range m.Blocks() {
		switch b.Type() {
		case messages.BlockText:
			text = append(text, b.Text())
		case messages.BlockReasoning:
			reasoning = append(reasoning, b.Text())
		case messages.BlockToolCall:
			args := b.Arguments()
			if strings.TrimSpace(args) == "" {
				args = "{}" // servers parse the arguments of a call they are sent back
			}
			calls = append(calls, wireToolCall{ID: b.ID(), Type: "function",
				Function: wireFunctionCall{Name: b.Name(), Arguments: args}})
		}
	}
	w := wireMessage{Role: "assistant", ToolCalls: calls}
	switch {
	case len(text) > 0:
		w.Content = jsonString(strings.Join(text, "\n"))
	case len(calls) > 0:
		w.Content = json.RawMessage("null")
	default:
		w.Content = jsonString("")
	}
	if r := strings.Join(reasoning, "\n"); inToolTurn && r != "" {
		w.ReasoningContent = &r
	}
	return w
}

// userMessages maps a user-role message: its tool results first, one
// role "tool" message each, then the rest as one role "user" message.
// Content that is all text is sent as a plain string (DeepSeek's own
// format); with an image it becomes a list of parts.
func (p *Provider) userMessages(m messages.Message) ([]wireMessage, error) {
	var out []wireMessage
	var parts []wireContentPart
	hasImage := false
	for b := range m.Blocks() {
		switch b.Type() {
		case messages.BlockToolResult:
			out = append(out, wireMessage{Role: "tool", ToolCallID: b.ToolCallID(),
				Content: jsonString(toolResultText(b))})
		case messages.BlockText:
			parts = append(parts, wireContentPart{Type: "text", Text: b.Text()})
		case messages.BlockImage:
			part, err := p.imagePart(b.Attachment())
			if err != nil {
				return nil, err
			}
			hasImage = hasImage || part.Type == "image_url"
			parts = append(parts, part)
		}
	}
	if len(parts) == 0 {
		if len(out) == 0 { // an empty user message stays a (empty) user message
			out = append(out, wireMessage{Role: "user", Content: jsonString("")})
		}
		return out, nil
	}
	w := wireMessage{Role: "user"}
	if hasImage {
		c, err := json.Marshal(parts)
		if err != nil {
			return nil, err
		}
		w.Content = c
	} else {
		texts := make([]string, len(parts))
		for i, pt := range parts {
			texts[i] = pt.Text
		}
		w.Content = jsonString(strings.Join(texts, "\n"))
	}
	return append(out, w), nil
}

// toolResultText is the text of a tool result's nested content. The
// chat-completions tool message carries text only: nested images are
// named by a placeholder, and the error flag, which the wire has no field
// for, is left to the content (tools write their error text there).
func toolResultText(b messages.ContentBlock) string {
	var parts []string
	for c := range b.NestedBlocks() {
		switch c.Type() {
		case messages.BlockText:
			parts = append(parts, c.Text())
		case messages.BlockImage:
			parts = append(parts, "[image]")
		}
	}
	return strings.Join(parts, "\n")
}

// imagePart resolves an image attachment (Config.ImageURL).
func (p *Provider) imagePart(att messages.JSON) (wireContentPart, error) {
	var url string
	if p.cfg.ImageURL != nil {
		u, err := p.cfg.ImageURL(att)
		if err != nil {
			return wireContentPart{}, fmt.Errorf("resolve image: %w", err)
		}
		url = u
	} else if v, ok := att.Field("url"); ok {
		url, _ = v.AsString()
	}
	if url == "" {
		return wireContentPart{Type: "text", Text: "[image omitted: no URL for the attachment]"}, nil
	}
	return wireContentPart{Type: "image_url", ImageURL: &wireImageURL{URL: url}}, nil
}

// jsonString encodes s as a JSON string.
func jsonString(s string) json.RawMessage {
	return json.RawMessage(messages.JSONString(s).String())
}
