package deepseek_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/llm/deepseek"
	"github.com/dshgo/dsh/messages"
)

// The provider against an OpenAI-compatible endpoint: here a local server
// that streams two content deltas and a finish as server-sent events. With
// a zero Config the provider talks to DeepSeek with the key of
// DEEPSEEK_API_KEY.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, data := range []string{
			`{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"}}]}`,
			`{"choices":[{"index":0,"delta":{"content":", world"}}]}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2}}`,
			`[DONE]`,
		} {
			fmt.Fprintf(w, "data: %s\n\n", data)
		}
	}))
	defer srv.Close()

	p, err := deepseek.New(deepseek.Config{BaseURL: srv.URL, APIKey: "unused"})
	if err != nil {
		panic(err)
	}
	prompt, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("hi")}, messages.UserSource())
	if err != nil {
		panic(err)
	}
	req := llm.NewRequest(messages.CallConfig{Provider: p.Name(), Model: "deepseek-chat"}, "Be brief.", []messages.Message{prompt}, nil)

	var a llm.BlockAssembler
	finish := llm.Run(context.Background(), p, req, func(c messages.StreamChunk) bool { a.Push(c); return true })
	usage, _ := a.Usage()
	fmt.Printf("%s %q in=%d out=%d\n", finish.Kind, a.Blocks()[0].Text(), usage.InputTokens, usage.OutputTokens)
	// Output:
	// stop "Hello, world" in=9 out=2
}
