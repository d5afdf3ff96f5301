package session_test

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// exampleModel is the model source of the examples' assistant messages.
var exampleModel = messages.ModelSource{Provider: "synthetic", Model: "example"}

// exampleTurn returns the drafts of one turn in which the model answers a
// prompt in two streamed text deltas. The assistant message cites the
// chunks it was assembled from (WithSources): chunks are log-only, the
// message is what the model sees next time.
func exampleTurn(l *session.Log, prompt, answer string, now int64) error {
	user, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(prompt)}, messages.UserSource())
	if err != nil {
		return err
	}
	reply, err := messages.NewAssistantMessage([]messages.ContentBlock{messages.TextBlock(answer)}, exampleModel)
	if err != nil {
		return err
	}
	header := session.NewEpochHeader(messages.CallConfig{Provider: exampleModel.Provider, Model: exampleModel.Model},
		session.AdapterDefaults{}, "You are terse.", nil)
	turn := l.Turns() + 1
	reason := session.ReasonInitial
	if _, ok := l.RequestHeader(); ok {
		reason = session.ReasonResume
	}
	var chunks []int64
	for _, d := range []session.Draft{
		session.TurnStart{Turn: turn}.Draft(),
		session.UserMessage{Message: user}.Draft(),
		session.StepStart{Turn: turn, Step: 1}.Draft(),
		session.RequestHeader{Header: header, Reason: reason}.Draft(),
		session.AssistantChunk{Turn: turn, Step: 1, Chunk: messages.TextDeltaChunk(0, answer[:3])}.Draft(),
		session.AssistantChunk{Turn: turn, Step: 1, Chunk: messages.TextDeltaChunk(0, answer[3:])}.Draft(),
	} {
		e, err := l.Append(d, now)
		if err != nil {
			return err
		}
		if e.Type() == session.TypeAssistantChunk {
			chunks = append(chunks, e.Seq())
		}
	}
	for _, d := range []session.Draft{
		session.AssistantMessage{Turn: turn, Step: 1, Message: reply}.Draft().WithSources(chunks),
		session.StepEnd{Turn: turn, Step: 1}.Draft(),
		session.TurnEnd{Turn: turn, Reason: session.TurnEndReason{Kind: session.EndCompleted}}.Draft(),
	} {
		if _, err := l.Append(d, now); err != nil {
			return err
		}
	}
	return nil
}

// A log is built by appending drafts, each checked against the rules of
// the format before it is committed; the messages a model sees are derived
// from it, never stored beside it.
func Example() {
	l, err := session.New(session.Header{ID: "example", CreatedAt: 1_700_000_000_000, Cwd: "/work"})
	if err != nil {
		panic(err)
	}
	if err := exampleTurn(l, "Say hello.", "Hello there.", 1_700_000_000_500); err != nil {
		panic(err)
	}

	// A draft that breaks a rule is refused and changes nothing.
	bad := session.TurnEnd{Turn: 1, Reason: session.TurnEndReason{Kind: "tired"}}.Draft()
	_, err = l.Append(bad, 1_700_000_001_000)
	fmt.Println(err)
	fmt.Println("invalid:", errors.Is(err, session.ErrInvalid), "events:", l.Len())

	for _, m := range l.DeriveMessages().All() {
		fmt.Println(m.Role(), m.Block(0).Text())
	}
	// Output:
	// session: event "turn/end" at seq 9: turn/end reason "tired" is unknown
	// invalid: true events: 9
	// user Say hello.
	// assistant Hello there.
}

// A log file is written with its chunk runs packed into rows and read back
// in one streaming pass; Restore rebuilds the log from what was read.
func ExampleReadFile() {
	l, err := session.New(session.Header{ID: "example", CreatedAt: 1})
	if err != nil {
		panic(err)
	}
	if err := exampleTurn(l, "Say hello.", "Hello there.", 2); err != nil {
		panic(err)
	}
	dir, err := os.MkdirTemp("", "session-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "example.jsonl.zstd")
	opts := session.WriteOptions{Zstd: true, Pack: session.PackChunks}
	if err := session.WriteFile(path, l.Header(), l.Events().Slice(), opts); err != nil {
		panic(err)
	}

	f, err := session.ReadFile(path)
	if err != nil {
		panic(err)
	}
	back, err := session.Restore(f.Header, f.Events)
	if err != nil {
		panic(err)
	}
	fmt.Println("compressed:", f.Compressed, "torn:", f.Torn != nil, "events:", back.Len())
	fmt.Println("messages:", back.DeriveMessages().Len())
	// Output:
	// compressed: true torn: false events: 9
	// messages: 2
}

// The session actor owns a log: other actors append to it and read from
// it with messages (a request from an actor, or RequestFuture at the
// edges, as here).
func ExampleProps() {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer sys.Shutdown()
	ask := func(pid *actor.PID, msg any) any {
		r, err := sys.Root.RequestFuture(pid, msg, 5*time.Second).Result()
		if err != nil {
			panic(err)
		}
		return r
	}

	l, err := session.New(session.Header{ID: "example", CreatedAt: 1})
	if err != nil {
		panic(err)
	}
	props, err := session.Props(session.Config{Log: l})
	if err != nil {
		panic(err)
	}
	pid := sys.Root.Spawn(props)

	user, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("hi")}, messages.UserSource())
	if err != nil {
		panic(err)
	}
	reply := ask(pid, session.NewAppend(1, session.TurnStart{Turn: 1}.Draft(),
		session.UserMessage{Message: user}.Draft()))
	switch r := reply.(type) {
	case session.AppendReply:
		fmt.Println("committed", r.Events.Len(), "events, ref", r.Ref)
	case session.AppendFailed:
		fmt.Println("refused:", r.Err)
	}

	// An Append is atomic: one refused draft refuses them all.
	bad := session.TurnEnd{Turn: 1, Reason: session.TurnEndReason{Kind: "tired"}}.Draft()
	reply = ask(pid, session.NewAppend(2, session.StepStart{Turn: 1, Step: 1}.Draft(), bad))
	if r, ok := reply.(session.AppendFailed); ok {
		fmt.Println("ref", r.Ref, "refused, invalid:", errors.Is(r.Err, session.ErrInvalid))
	}

	msgs := ask(pid, session.QueryMessages{Ref: 3}).(session.MessagesReply)
	fmt.Println("messages at", msgs.Len, "events:", msgs.Messages.Len())
	// Output:
	// committed 2 events, ref 1
	// ref 2 refused, invalid: true
	// messages at 2 events: 1
}
