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
