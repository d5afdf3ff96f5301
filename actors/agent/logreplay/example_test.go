package logreplay_test

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/dshgo/dsh/actors/agent/logreplay"
)

// Re-running a recorded session through dsh's own loop: the recording is
// a reference snapshot from the corpus (LoadFixture substitutes its
// placeholders; Load reads a log dsh or the reference wrote), and the
// replay is conformant when the log dsh writes matches it event for event.
func Example() {
	path := filepath.Join("..", "..", "..", "testdata", "harness", "acp", "tool-call-turn", "session.jsonl")
	rec, override, err := logreplay.LoadFixture(path)
	if err != nil {
		panic(err)
	}
	res, err := logreplay.Run(context.Background(), rec, logreplay.Options{Override: override, Timeout: 20 * time.Second})
	if err != nil {
		panic(err)
	}
	if res.Conformant {
		fmt.Println("conformant:", len(res.Replayed), "events")
	} else {
		fmt.Println("diverges:", res.Divergence)
	}
	// Output:
	// conformant: 104 events
}
