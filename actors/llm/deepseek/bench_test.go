package deepseek

import (
	"bytes"
	"io"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// parseAll runs a whole SSE body through the reader and the decoder, the
// work Stream does per byte once the response has arrived. It returns the
// number of wire chunks (data events, [DONE] included) and of StreamChunks
// produced.
func parseAll(p *Provider, body []byte) (wire, out int, err error) {
	sse := newSSEReader(bytes.NewReader(body))
	dec := newDecoder(p)
	for {
		ev, err := sse.next()
		if err == io.EOF {
			return wire, out, nil
		}
		if err != nil {
			return wire, out, err
		}
		wire++
		if string(ev.data) == "[DONE]" {
			cs, f := dec.done()
			if f != nil {
				return wire, out, f
			}
			return wire, out + len(cs), nil
		}
		cs, f := dec.event(ev.data)
		if f != nil {
			return wire, out, f
		}
		out += len(cs)
	}
}

// BenchmarkParseSSE parses the 183 KB deepseek-reasoner recording (588
// chunks of reasoning and text). chunks/s and allocs/chunk count wire
// chunks, the SSE data events.
func BenchmarkParseSSE(b *testing.B) {
	body := readHTTPRR(b, "langchaingo-deepseek/TestMultiContentTextWithReasoning-streaming-deepseek.httprr")[0].respBody
	p := &Provider{cfg: Config{Name: "deepseek"}}
	wire, out, err := parseAll(p, body)
	require.NoError(b, err)
	require.Equal(b, 589, wire)

	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	n := 0
	for b.Loop() {
		if _, _, err := parseAll(p, body); err != nil {
			b.Fatal(err)
		}
		n++
	}
	runtime.ReadMemStats(&after)
	chunks := float64(n * wire)
	b.ReportMetric(chunks/b.Elapsed().Seconds(), "chunks/s")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/chunks, "allocs/chunk")
	b.ReportMetric(float64(out), "streamchunks/op")
}
