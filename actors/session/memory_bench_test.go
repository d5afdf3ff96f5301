package session

import (
	"runtime"
	"testing"
)

// BenchmarkLogMemory appends b.N events of the realistic mix of
// actor_bench_test.go to one log and reports the retained heap per logged event
// (docs/performance.md#targets: ≤ 200 B per event), beside the baseline of the
// same events' encoded JSONL bytes. The drafts are built inside the
// measurement: an event keeps its draft's data. Run it with a fixed count, e.g.
// -benchtime=200000x.
func BenchmarkLogMemory(b *testing.B) {
	script := newTurnScript(200)
	l, err := New(Header{ID: "mem", CreatedAt: 1})
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	n := 0
	for b.Loop() {
		if _, err := l.Append(script.next(), 1); err != nil {
			b.Fatal(err)
		}
		n++
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "B/event")
	b.ReportMetric(float64(len(AppendRecords(nil, l.Events().Slice(), Verbatim)))/float64(n), "jsonl-B/event")
	runtime.KeepAlive(l)
}
