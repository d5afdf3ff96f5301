package agent_test

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// shout is a model: it answers the last message in capitals, as one text
// block.
type shout struct{}

func (shout) Name() string { return "shout" }

func (shout) Stream(_ context.Context, req llm.Request) iter.Seq2[messages.StreamChunk, error] {
	return func(yield func(messages.StreamChunk, error) bool) {
		var text string
		for _, m := range req.Messages() {
			text = strings.ToUpper(m.Content()[0].Text())
		}
		for _, c := range []messages.StreamChunk{
			messages.BlockStartChunk(0, messages.BlockText),
			messages.TextDeltaChunk(0, text),
			messages.BlockEndChunk(0, messages.TextBlock(text)),
			messages.FinishChunk(messages.FinishReason{Kind: messages.FinishStop}, messages.JSON{}),
		} {
			if !yield(c, nil) {
				return
			}
		}
	}
}

// An agent beside the session actor whose log it writes. A Template
// prepares a configuration once (a host makes every session's agent from
// one); its Props spawn the agent of one session actor, which spawns its
// own inbox and stream actors. A Followup starts a turn; WaitIdle is
// answered once the turn has ended; the log holds the whole turn, and the
// history the next request will carry is derived from it.
func Example() {
	// protoactor's own log records are not part of the example.
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

	lg, err := session.New(session.Header{ID: "example", CreatedAt: 1})
	if err != nil {
		panic(err)
	}
	sessionProps, err := session.Props(session.Config{Log: lg})
	if err != nil {
		panic(err)
	}
	sess := sys.Root.Spawn(sessionProps)

	tmpl, err := agent.NewTemplate(agent.Config{Provider: shout{}, Model: "shout-1", System: "Answer loudly."})
	if err != nil {
		panic(err)
	}
	agentProps, err := tmpl.Props(sess)
	if err != nil {
		panic(err)
	}
	ag := sys.Root.Spawn(agentProps)

	prompt, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("hello")}, messages.UserSource())
	if err != nil {
		panic(err)
	}
	switch r := ask(ag, agent.Followup{Ref: 1, Message: prompt}).(type) {
	case agent.Sent:
		fmt.Println("sent:", r.ID == prompt.ID())
	case agent.SendFailed:
		fmt.Println("refused:", r.Err)
	}
	ask(ag, agent.WaitIdle{Ref: 2})

	events := ask(sess, session.QueryEvents{Ref: 3}).(session.EventsReply).Events
	for e := range events.All() {
		fmt.Println(e.Seq(), e.Type())
	}
	history := ask(sess, session.QueryMessages{Ref: 4}).(session.MessagesReply).Messages
	for _, m := range history.All() {
		fmt.Printf("%s: %s\n", m.Role(), m.Content()[0].Text())
	}
	// Output:
	// sent: true
	// 0 agent/inbox/spliced
	// 1 turn/start
	// 2 agent/inbox/spliced
	// 3 step/start
	// 4 user/message
	// 5 request/header
	// 6 request/context
	// 7 assistant/chunk
	// 8 assistant/chunk
	// 9 assistant/chunk
	// 10 assistant/chunk
	// 11 assistant/message
	// 12 step/end
	// 13 turn/end
	// user: hello
	// assistant: HELLO
}
