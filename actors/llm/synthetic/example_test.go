package synthetic_test

import (
	"context"
	"fmt"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/messages"
)

// A synthetic model answering one request offline: the same seed and the
// same request give the same chunks, so two calls assemble the same answer.
// Here it reasons first, then answers in text, each block in chunks of
// ChunkSize bytes.
func Example() {
	model, err := synthetic.New(synthetic.Config{Seed: 7, TextChunks: 10, ReasoningChunks: 4, ReasoningRate: 1})
	if err != nil {
		panic(err)
	}
	prompt, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("hello")}, messages.UserSource())
	if err != nil {
		panic(err)
	}
	req := llm.NewRequest(messages.CallConfig{Provider: model.Name(), Model: model.Model()}, "", []messages.Message{prompt}, nil)

	answer := func() []messages.ContentBlock {
		var a llm.BlockAssembler
		llm.Run(context.Background(), model, req, func(c messages.StreamChunk) bool { a.Push(c); return true })
		fmt.Println("finish:", a.Finish().Kind)
		return a.Blocks()
	}
	first, second := answer(), answer()
	for _, b := range first {
		fmt.Println(b.Type(), len(b.Text()) > 0)
	}
	fmt.Println("same answer:", first[1].Text() == second[1].Text())
	// Output:
	// finish: stop
	// finish: stop
	// reasoning true
	// text true
	// same answer: true
}
