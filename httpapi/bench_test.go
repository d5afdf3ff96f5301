package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/supervisor"
)

// streamLoad is what one run of BenchmarkStreams measured.
type streamLoad struct {
	chunks    int64         // assistant/chunk events delivered
	cpu       time.Duration // process CPU (user+system) over the run
	latencies []int64       // µs from commit to the client, one per event
}

func (l streamLoad) cpuPerChunk() float64 { return float64(l.cpu.Nanoseconds()) / float64(l.chunks) }

func (l streamLoad) percentile(p float64) int64 {
	slices.Sort(l.latencies)
	return l.latencies[min(len(l.latencies)-1, int(float64(len(l.latencies))*p))]
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchSessions, benchTokensPerSecond and benchChunks are the load: that
// many sessions, each with one client, each running one turn whose
// answer streams about benchChunks deltas at a model's pace.
const (
	benchSessions        = 1000
	benchTokensPerSecond = 20
	benchChunks          = 40
)

// runStreamLoad drives benchSessions sessions, one turn each, with one
// subscriber per session: over HTTP (one SSE client per session) or in
// process (Host.Subscribe). Events are stamped at commit in µs (the
// host's Clock), so a client's latency is its receive time minus the
// event's time.
func runStreamLoad(b *testing.B, overHTTP bool) streamLoad {
	model, err := synthetic.New(synthetic.Config{Seed: 7, TextChunks: benchChunks, TokensPerSecond: benchTokensPerSecond})
	if err != nil {
		b.Fatal(err)
	}
	h, err := supervisor.Open(supervisor.Config{Provider: model, Clock: func() int64 { return time.Now().UnixMicro() }})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	defer func() { _ = h.Close(context.Background()) }()
	ids := make([]session.SessionID, benchSessions)
	for i := range ids {
		if ids[i], err = h.Create(ctx, supervisor.CreateOptions{ID: session.SessionID(fmt.Sprintf("s%04d", i))}); err != nil {
			b.Fatal(err)
		}
	}
	var ts *httptest.Server
	var client *http.Client
	if overHTTP {
		srv, err := New(Config{Backend: h})
		if err != nil {
			b.Fatal(err)
		}
		ts = httptest.NewServer(srv)
		defer func() { srv.Close(); ts.Close(); srv.Wait() }()
		client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchSessions}}
		defer client.CloseIdleConnections()
	}

	var mu sync.Mutex
	var out streamLoad
	var chunks atomic.Int64
	var ready, done sync.WaitGroup
	errs := make(chan error, benchSessions)
	for _, id := range ids {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			lat := make([]int64, 0, 2*benchChunks)
			record := func(typ string, at int64) {
				lat = append(lat, time.Now().UnixMicro()-at)
				if typ == string(session.TypeAssistantChunk) {
					chunks.Add(1)
				}
			}
			var err error
			if overHTTP {
				err = readSSE(ctx, client, ts.URL, id, ready.Done, record)
			} else {
				err = readSub(ctx, h, id, ready.Done, record)
			}
			if err != nil {
				errs <- err
			}
			mu.Lock()
			out.latencies = append(out.latencies, lat...)
			mu.Unlock()
		}()
	}
	ready.Wait()
	start := processCPU()
	// The turns start spread over a second, as users' would.
	for i, id := range ids {
		go func() {
			<-time.After(time.Duration(i) * time.Second / benchSessions)
			if err := h.Followup(ctx, id, userMsgB("go")); err != nil {
				errs <- err
			}
		}()
	}
	done.Wait()
	out.cpu = processCPU() - start
	out.chunks = chunks.Load()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return out
}

// readSSE reads a session's stream until its turn ends.
func readSSE(ctx context.Context, c *http.Client, base string, id session.SessionID, ready func(), record func(string, int64)) error {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/sessions/"+string(id)+"/events", nil)
	if err != nil {
		return err
	}
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	r := bufio.NewReaderSize(res.Body, 64<<10)
	first := true
	var typ string
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if first { // the opening comment: the subscription is in place
			first = false
			ready()
		}
		s := string(line)
		switch {
		case strings.HasPrefix(s, "event: "):
			typ = strings.TrimSpace(s[7:])
		case strings.HasPrefix(s, "data: "):
			_, rest, _ := strings.Cut(s, `,"time":`)
			n := strings.IndexByte(rest, ',')
			at, err := strconv.ParseInt(rest[:n], 10, 64)
			if err != nil {
				return err
			}
			record(typ, at)
			if typ == string(session.TypeTurnEnd) {
				return nil
			}
		}
	}
}

// readSub reads a session's subscription until its turn ends.
func readSub(ctx context.Context, h *supervisor.Host, id session.SessionID, ready func(), record func(string, int64)) error {
	sub, err := h.Subscribe(ctx, id, 0)
	if err != nil {
		return err
	}
	defer sub.Close()
	ready()
	for ev := range sub.Events() {
		record(string(ev.Type()), ev.Time())
		if ev.Type() == session.TypeTurnEnd {
			return nil
		}
	}
	return fmt.Errorf("subscription of %s ended: %v", id, sub.Err())
}

// BenchmarkStreams1000: 1,000 sessions, each with one event stream, one
// turn each at a model's pace: the delivery latency from commit to the
// client (p50, p99) and the CPU per chunk over HTTP (SSE), and its ratio
// to the same load through the in-process Host.Subscribe. Run with
// -benchtime=1x; each iteration runs both loads.
func BenchmarkStreams1000(b *testing.B) {
	for b.Loop() {
		in := runStreamLoad(b, false)
		web := runStreamLoad(b, true)
		b.ReportMetric(float64(web.percentile(0.5)), "http-p50-µs")
		b.ReportMetric(float64(web.percentile(0.99)), "http-p99-µs")
		b.ReportMetric(float64(in.percentile(0.5)), "inproc-p50-µs")
		b.ReportMetric(float64(in.percentile(0.99)), "inproc-p99-µs")
		b.ReportMetric(web.cpuPerChunk(), "http-cpu-ns/chunk")
		b.ReportMetric(in.cpuPerChunk(), "inproc-cpu-ns/chunk")
		b.ReportMetric(web.cpuPerChunk()/in.cpuPerChunk(), "cpu-ratio")
		b.ReportMetric(float64(web.chunks), "chunks")
	}
}
