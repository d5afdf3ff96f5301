package session

import (
	"runtime"
	"testing"
)

// BenchmarkLogMemory reports the retained heap per logged event for the
// realistic mix of actor_bench_test.go (DESIGN §10: ≤ 200 B per event),
// beside the baseline of the same events' encoded JSONL bytes. The drafts
// are built inside the measurement: an event keeps its draft's data.
func BenchmarkLogMemory(b *testing.B) {
	const n = 200_000
	for b.Loop() {
		script := newTurnScript(200)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		l, err := New(Header{ID: "mem", CreatedAt: 1})
		if err != nil {
			b.Fatal(err)
		}
		for range n {
			if _, err := l.Append(script.next(), 1); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/event")
		b.ReportMetric(float64(len(AppendRecords(nil, l.Events().Slice(), false)))/n, "jsonl-B/event")
		runtime.KeepAlive(l)
	}
}
