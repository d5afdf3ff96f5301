package supervisor_test

import (
	"context"
	"fmt"
	"os"

	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/supervisor"
)

// Example embeds dsh: a host on a data directory (JSONL+zstd logs, every
// turn end durable), one session, one turn against the default offline
// synthetic model, then the model-visible history rebuilt from the log.
func Example() {
	dir, err := os.MkdirTemp("", "dsh-example-*")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	host, err := supervisor.Open(supervisor.Config{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer host.Close(ctx)

	id, err := host.Create(ctx, supervisor.CreateOptions{})
	if err != nil {
		panic(err)
	}
	prompt, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("hello")}, messages.UserSource())
	if err != nil {
		panic(err)
	}
	if err := host.Followup(ctx, id, prompt); err != nil {
		panic(err)
	}
	// WaitIdle returns once the turn has ended and is durable on disk.
	if err := host.WaitIdle(ctx, id); err != nil {
		panic(err)
	}
	history, err := host.Messages(ctx, id)
	if err != nil {
		panic(err)
	}
	for _, m := range history {
		fmt.Println(m.Role())
	}
	// Output:
	// user
	// assistant
}

// ExampleSessions codes against supervisor.Sessions, so the same function
// drives the sessions of one process (a *Host, here in memory) or of a
// cluster (a *cluster.Client).
func ExampleSessions() {
	ask := func(ctx context.Context, s supervisor.Sessions, text string) ([]messages.Message, error) {
		id, err := s.Create(ctx, supervisor.CreateOptions{})
		if err != nil {
			return nil, err
		}
		msg, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(text)}, messages.UserSource())
		if err != nil {
			return nil, err
		}
		if err := s.Followup(ctx, id, msg); err != nil {
			return nil, err
		}
		if err := s.WaitIdle(ctx, id); err != nil {
			return nil, err
		}
		return s.Messages(ctx, id)
	}

	ctx := context.Background()
	host, err := supervisor.Open(supervisor.Config{})
	if err != nil {
		panic(err)
	}
	defer host.Close(ctx)
	history, err := ask(ctx, host, "hello")
	if err != nil {
		panic(err)
	}
	fmt.Println(len(history), history[1].Role())
	// Output:
	// 2 assistant
}
