package messages_test

import (
	"fmt"

	"github.com/dshgo/dsh/messages"
)

// Messages are built by constructors that validate their input and mint
// the id; they are frozen from then on, so one value can go from the inbox
// to the log to a model request unchanged.
func Example() {
	prompt, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("List the files.")},
		messages.UserSource())
	if err != nil {
		panic(err)
	}
	call, err := messages.NewAssistantMessage([]messages.ContentBlock{
		messages.ReasoningBlock("ls will do."),
		messages.ToolCallBlock("call_1", "ls", `{"path":"."}`),
	}, messages.ModelSource{Provider: "synthetic", Model: "example"})
	if err != nil {
		panic(err)
	}
	// A tool result is a user-role message answering one call.
	result := messages.NewToolResultMessage("call_1",
		[]messages.ContentBlock{messages.TextBlock("go.mod main.go")}, messages.ToolSucceeded)

	for _, m := range []messages.Message{prompt, call, result} {
		fmt.Print(m.Role(), " (", m.Source().Kind(), "):")
		for b := range m.Blocks() {
			fmt.Print(" ", b.Type())
		}
		fmt.Println()
	}
	fmt.Println(result.Block(0).ToolCallID(), result.Block(0).IsError())
	// Output:
	// user (user): text
	// assistant (model): reasoning tool-call
	// user (tool): tool-result
	// call_1 false
}

// A message read from a log keeps its id and its JSON text: ImportMessage
// is the one way to build a message with an existing id, and what it reads
// encodes back byte for byte, members dsh does not interpret included.
func ExampleImportMessage() {
	j := messages.MustParseJSON(`{"id":"msg-1","role":"user","content":[{"type":"text","text":"hi"}],` +
		`"source":{"kind":"user"},"x-note":"kept"}`)
	m, err := messages.ImportMessage(j)
	if err != nil {
		panic(err)
	}
	fmt.Println(m.ID(), m.Role(), m.Block(0).Text())
	fmt.Println(m.JSON().Equal(j))

	// Rewriting the content keeps the id (and the member dsh does not
	// interpret).
	r := m.WithContent([]messages.ContentBlock{messages.TextBlock("hello")})
	fmt.Println(r.ID(), r.JSON())
	// Output:
	// msg-1 user hi
	// true
	// msg-1 {"id":"msg-1","role":"user","content":[{"type":"text","text":"hello"}],"source":{"kind":"user"},"x-note":"kept"}
}

// JSON holds a value as its canonical text: what the reference writes is
// read and written back unchanged, and what it would refuse is refused.
func ExampleParseJSON() {
	j, err := messages.ParseJSON([]byte(`{ "n": 1.50, "s": "\u00e9" }`))
	if err != nil {
		panic(err)
	}
	fmt.Println(j)
	n, _ := j.Field("n")
	fmt.Println(n, n.Equal(messages.MustParseJSON("1.5")))

	_, err = messages.ParseJSON([]byte(`{"a":1,"a":2}`))
	fmt.Println(err)
	// Output:
	// {"n":1.50,"s":"\u00e9"}
	// 1.50 true
	// messages: not lossless JSON: duplicate key "a" at offset 7
}
