package persister

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/vfs"
	"github.com/dshgo/dsh/messages"
)

// ---- benchmarks ----

// benchBatches returns the batches of one session: each a turn of a
// realistic mix (prompt, a tool step with streamed arguments, a text step
// with streamed deltas), as the write-behind would hand them over.
func benchBatches(b *testing.B, turns int) [][]session.Event {
	b.Helper()
	l := newJL(b, "bench")
	var batches [][]session.Event
	for turn := int64(1); turn <= int64(turns); turn++ {
		start := l.len()
		tt := l.begin(fmt.Sprintf("request %d", turn))
		callID := fmt.Sprintf("call-%d", turn)
		for i := range 20 {
			l.add(session.AssistantChunk{Turn: tt, Step: 1, Chunk: messages.ToolCallDeltaChunk(0, callID, fmt.Sprintf(`"a%d"`, i))}.Draft())
		}
		m, err := messages.NewAssistantMessage([]messages.ContentBlock{messages.ToolCallBlock(callID, "read", `{"path":"x"}`)}, storeTestModel)
		require.NoError(b, err)
		l.add(session.AssistantMessage{Turn: tt, Step: 1, Message: m, Usage: messages.TokenUsage{InputTokens: 1000, OutputTokens: 40}, HasUsage: true}.Draft())
		call := l.add(session.ToolCall{Turn: tt, Step: 1, CallID: callID, Name: "read", Arguments: `{"path":"x"}`}.Draft())
		res := messages.NewToolResultMessage(callID, []messages.ContentBlock{messages.TextBlock(strings.Repeat("file contents ", 40))}, messages.ToolSucceeded)
		l.add(session.ToolResult{Turn: tt, Step: 1, Message: res}.Draft().WithSources([]int64{call.Seq()}))
		l.add(session.StepEnd{Turn: tt, Step: 1}.Draft())
		l.add(session.StepStart{Turn: tt, Step: 2}.Draft())
		var text strings.Builder
		for i := range 40 {
			w := fmt.Sprintf("word%d ", i)
			text.WriteString(w)
			l.add(session.AssistantChunk{Turn: tt, Step: 2, Chunk: messages.TextDeltaChunk(0, w)}.Draft())
		}
		m, err = messages.NewAssistantMessage([]messages.ContentBlock{messages.TextBlock(text.String())}, storeTestModel)
		require.NoError(b, err)
		l.add(session.AssistantMessage{Turn: tt, Step: 2, Message: m, Usage: messages.TokenUsage{InputTokens: 1100, OutputTokens: 40}, HasUsage: true}.Draft())
		l.add(session.StepEnd{Turn: tt, Step: 2}.Draft())
		l.add(session.TurnEnd{Turn: tt, Reason: session.TurnEndReason{Kind: session.EndCompleted}}.Draft())
		batches = append(batches, l.from(start))
	}
	return batches
}

// BenchmarkJSONLAppend appends one batch (one turn, ~70 events) per
// iteration to 1000 sessions in turn, on the real file system, fsync
// included: the cost of durability per batch, with the handle cache
// (256) smaller than the session count.
func BenchmarkJSONLAppend(b *testing.B) {
	const sessions = 1000
	b.Run(fmt.Sprintf("sessions=%d", sessions), func(b *testing.B) {
		ctx := b.Context()
		const turns = 64
		batches := benchBatches(b, turns)
		s := newJSONLOn(b, vfs.OS(), b.TempDir(), JSONLConfig{})
		defer s.Close()
		ids := make([]session.SessionID, sessions)
		for i := range ids {
			ids[i] = session.SessionID(fmt.Sprintf("bench-%04d", i))
			require.NoError(b, s.Create(session.Header{ID: ids[i], CreatedAt: storeTestNow, Cwd: "/work/proj"}))
			require.NoError(b, s.Append(ctx, ids[i], batches[0], Sync))
		}
		// A session reaching the last turn starts over as a new session
		// would; the count says where each one is.
		next := make([]int, sessions)
		for i := range next {
			next[i] = 1
		}
		restarted := 0
		events := 0
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			k := i % sessions
			i++
			if next[k] == turns {
				b.StopTimer()
				restarted++
				ids[k] = session.SessionID(fmt.Sprintf("bench-%04d-%d", k, restarted))
				require.NoError(b, s.Create(session.Header{ID: ids[k], CreatedAt: storeTestNow, Cwd: "/work/proj"}))
				next[k] = 0
				b.StartTimer()
			}
			batch := batches[next[k]]
			if err := s.Append(ctx, ids[k], batch, Sync); err != nil {
				b.Fatal(err)
			}
			next[k]++
			events += len(batch)
		}
		b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
		b.ReportMetric(float64(events)/float64(b.N), "events/batch")
	})
}

// BenchmarkJSONEncodeOnly encodes the same batches without I/O: the share
// of BenchmarkJSONLAppend that is encoding (packing, JSON, zstd).
func BenchmarkJSONEncodeOnly(b *testing.B) {
	batches := benchBatches(b, 64)
	for _, c := range []struct {
		name string
		zstd bool
	}{{"encoding=plain", false}, {"encoding=zstd", true}} {
		b.Run(c.name, func(b *testing.B) {
			var buf, frame []byte
			events, size := 0, 0
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				batch := batches[i%len(batches)]
				i++
				buf = session.AppendRecords(buf[:0], batch, session.PackChunks)
				n := len(buf)
				if c.zstd {
					frame = session.AppendZstdFrame(frame[:0], buf)
					n = len(frame)
				}
				events += len(batch)
				size += n
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(size)/float64(b.N), "bytes/batch")
		})
	}
}
