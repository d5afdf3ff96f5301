package deepseek

import "encoding/json"

// The wire shapes of an OpenAI-compatible chat-completions stream, as far
// as this adapter reads them. Unknown members (logprobs, obfuscation,
// system_fingerprint, OpenRouter's cost fields, ...) are ignored. A JSON
// null reads as the zero value; null and "" are the same everywhere here.

// wireChunk is one `data:` payload.
type wireChunk struct {
	Choices []wireChoice `json:"choices"`
	Usage   *wireUsage   `json:"usage"`
	// Error is kept raw: servers send an object ({"message","type",
	// "code"}, where code is a string or a number), and some a bare
	// string.
	Error json.RawMessage `json:"error"`
}

type wireChoice struct {
	Index        int       `json:"index"`
	Delta        wireDelta `json:"delta"`
	FinishReason string    `json:"finish_reason"`
}

type wireDelta struct {
	Content          string `json:"content"`
	ReasoningContent string `json:"reasoning_content"`
	// Reasoning is the name OpenRouter (and newer vLLM) give the same
	// field; it is read only when reasoning_content is empty, so a server
	// sending both is not counted twice.
	Reasoning string              `json:"reasoning"`
	ToolCalls []wireToolCallDelta `json:"tool_calls"`
}

type wireToolCallDelta struct {
	// Index is the call's position in the response; nil when a server
	// leaves it out (the adapter then matches by id, or the last call).
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// wireUsage holds the counts this adapter maps. DeepSeek reports
// prompt_cache_hit_tokens (and, equal to it, prompt_tokens_details.
// cached_tokens); OpenAI only the latter.
type wireUsage struct {
	PromptTokens         int64  `json:"prompt_tokens"`
	CompletionTokens     int64  `json:"completion_tokens"`
	PromptCacheHitTokens *int64 `json:"prompt_cache_hit_tokens"`
	PromptTokensDetails  *struct {
		CachedTokens *int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens *int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// wireError is the body of an error object.
type wireError struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
}

// The request side.

type wireRequest struct {
	Model           string            `json:"model"`
	Messages        []wireMessage     `json:"messages"`
	Stream          bool              `json:"stream"`
	StreamOptions   wireStreamOptions `json:"stream_options"`
	Tools           []wireTool        `json:"tools,omitempty"`
	MaxTokens       *int64            `json:"max_tokens,omitempty"`
	Temperature     *float64          `json:"temperature,omitempty"`
	Stop            []string          `json:"stop,omitempty"`
	ReasoningEffort string            `json:"reasoning_effort,omitempty"`
}

type wireStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type wireMessage struct {
	Role string `json:"role"`
	// Content is a JSON string, null, or an array of content parts.
	Content          json.RawMessage `json:"content"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []wireToolCall  `json:"tool_calls,omitempty"`
	ToolCallID       string          `json:"tool_call_id,omitempty"`
}

type wireToolCall struct {
	ID       string           `json:"id"`
	Type     string           `json:"type"`
	Function wireFunctionCall `json:"function"`
}

type wireFunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type wireContentPart struct {
	Type     string        `json:"type"`
	Text     string        `json:"text,omitempty"`
	ImageURL *wireImageURL `json:"image_url,omitempty"`
}

type wireImageURL struct {
	URL string `json:"url"`
}

type wireTool struct {
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}
