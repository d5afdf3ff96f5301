package synthetic

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/dshgo/dsh/actors/llm"
)

// BenchmarkSynthetic measures whole streams read to their end, as fast as
// possible (no latency), and reports the throughput per core in chunks/s
// and the heap allocations per chunk. One op is one stream.
func BenchmarkSynthetic(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  Config
	}{
		{"mix=text", Config{Seed: 1}},
		{"mix=reasoning+tools", Config{Seed: 1, ReasoningRate: 0.5, ToolCallRate: 0.3, MaxToolCalls: 2}},
		{"mix=text/chunk=1", Config{Seed: 1, ChunkSize: 1}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := newProvider(b, bc.cfg)
			reqs := make([]llm.Request, 64)
			for i := range reqs {
				reqs[i] = request(b, fmt.Sprintf("bench-%d", i), "benchmark prompt")
			}
			ctx := context.Background()
			var chunks, i int
			var before, after runtime.MemStats
			b.ReportAllocs()
			runtime.ReadMemStats(&before)
			for b.Loop() {
				for _, err := range p.Stream(ctx, reqs[i%len(reqs)]) {
					if err != nil {
						b.Fatal(err)
					}
					chunks++
				}
				i++
			}
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(chunks)/b.Elapsed().Seconds(), "chunks/s")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(chunks), "allocs/chunk")
			b.ReportMetric(float64(chunks)/float64(i), "chunks/op")
		})
	}
}
