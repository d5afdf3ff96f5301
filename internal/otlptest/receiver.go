// Package otlptest is an OTLP/HTTP trace receiver for tests: it listens
// on 127.0.0.1, decodes each export request's protobuf with the
// OpenTelemetry protocol module, and keeps the spans for the test to read.
package otlptest

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// maxBody bounds one request's body.
const maxBody = 16 << 20

// Receiver is a running OTLP/HTTP trace receiver. Safe for concurrent use.
type Receiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	spans    []*tracepb.Span // guarded by mu
	requests int             // guarded by mu
	changed  chan struct{}   // closed and replaced on each request; guarded by mu
}

// New starts a receiver on 127.0.0.1, closed when the test ends.
func New(t testing.TB) *Receiver {
	r := &Receiver{changed: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

// URL returns the receiver's base URL (traces go to URL/v1/traces).
func (r *Receiver) URL() string { return r.srv.URL }

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	var body io.Reader = http.MaxBytesReader(w, req.Body, maxBody)
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer zr.Close()
		body = io.LimitReader(zr, maxBody)
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "want application/x-protobuf, got "+ct, http.StatusUnsupportedMediaType)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(data, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	r.requests++
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// Spans returns the spans received so far, in arrival order. The slice is
// the caller's; the spans must not be modified.
func (r *Receiver) Spans() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

// WaitSpans waits until at least n spans have arrived, or fails the test
// after timeout, and returns them.
func (r *Receiver) WaitSpans(t testing.TB, n int, timeout time.Duration) []*tracepb.Span {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		got, changed := len(r.spans), r.changed
		r.mu.Unlock()
		if got >= n {
			return r.Spans()
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("otlptest: %d spans after %v, want %d", got, timeout, n)
		}
	}
}
