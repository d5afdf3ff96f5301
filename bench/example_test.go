package bench_test

import (
	"context"
	"fmt"

	"github.com/dshgo/dsh/bench"
)

// A small load: four sessions of two turns each against the synthetic
// model, every turn end durable in a temporary directory, each written log
// read back and verified afterwards. dsh bench is this, with a thousand
// sessions and the results table (bench.WriteTable).
func Example() {
	rep, err := bench.Run(context.Background(), bench.Options{
		Sessions: 4, Turns: 2, Chunks: 20, ToolRate: -1, ReasoningRate: -1, Seed: 1, NoBaselines: true,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("turns:", rep.Turns, "files verified:", rep.FilesVerified, "write failures:", rep.WriteFailures)
	// Output:
	// turns: 8 files verified: 4 write failures: 0
}
