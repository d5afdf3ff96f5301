package inbox_test

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// An inbox actor beside the session actor whose log records it: a followup
// sent to the inbox is in the log (an agent/inbox/spliced event) before the
// inbox answers, and the inbox's pending lists say what waits for the agent.
// In a host the agent spawns the inbox and forwards its sends to it; the
// protocol is the same.
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
	inboxProps, err := inbox.Props(inbox.ActorConfig{Session: sess})
	if err != nil {
		panic(err)
	}
	in := sys.Root.Spawn(inboxProps)

	prompt, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("hello")}, messages.UserSource())
	if err != nil {
		panic(err)
	}
	switch r := ask(in, inbox.Followup(1, prompt)).(type) {
	case inbox.SendReply:
		fmt.Println("queued:", r.ID == prompt.ID())
	case inbox.SendFailed:
		fmt.Println("refused:", r.Err)
	}

	pending := ask(in, inbox.QueryPending{Ref: 2}).(inbox.Pending)
	fmt.Println("next-turn:", len(pending.NextTurn()), "next-step:", len(pending.NextStep()))

	events := ask(sess, session.QueryEvents{Ref: 3}).(session.EventsReply).Events
	for e := range events.All() {
		fmt.Println(e.Seq(), e.Type())
	}
	// Output:
	// queued: true
	// next-turn: 1 next-step: 0
	// 0 agent/inbox/spliced
}
