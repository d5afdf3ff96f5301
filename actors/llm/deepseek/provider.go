package deepseek

import (
	"bytes"
	"context"
	"errors"
	"io"
	"iter"
	"mime"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/messages"
)

// Provider streams chat completions from an OpenAI-compatible endpoint.
// Build one with New. It is safe for concurrent use: it holds only its
// immutable config, and each Stream call has its own state.
type Provider struct {
	cfg      Config // defaults applied
	endpoint string
	now      func() time.Time // the clock for Retry-After dates; tests replace it
}

var _ llm.Provider = (*Provider)(nil)

// New returns a provider for cfg (zero fields take their defaults; the
// API key, when empty, is read from DEEPSEEK_API_KEY now).
func New(cfg Config) (*Provider, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Provider{
		cfg:      cfg,
		endpoint: strings.TrimRight(cfg.BaseURL, "/") + "/chat/completions",
		now:      time.Now,
	}, nil
}

// Name returns the provider id (Config.Name).
func (p *Provider) Name() string { return p.cfg.Name }

// String describes the provider without its API key.
func (p *Provider) String() string { return "deepseek.Provider(" + p.cfg.String() + ")" }

// GoString is String, so that %#v redacts the key too.
func (p *Provider) GoString() string { return p.String() }

// errIdle is the cancel cause the watchdog sets.
var errIdle = errors.New("deepseek: stream idle")

// Stream performs one call: POST {BaseURL}/chat/completions with stream:
// true. It yields the chunks of docs/messages.md#stream-chunks in the
// adapter's emission order (see decoder) and ends either with a finish chunk
// (stop, tool-calls, max-tokens) or with one error, an LlmFailure, after
// which it yields nothing more:
//
//	HTTP status / condition             code
//	401, 403                            AUTH
//	400 with context-window text        CONTEXT_WINDOW_EXCEEDED
//	402, or quota/balance text (<500)   QUOTA
//	400, 413                            INVALID_REQUEST
//	429                                 RATE_LIMIT (providerRetryAfterMs from Retry-After)
//	>= 500                              SERVER
//	other non-2xx                       HTTP_<status>
//	connection failure                  TRANSPORT
//	body ends (or breaks) before [DONE] STREAM_CLOSED
//	no data event for IdleTimeout       TIMEOUT
//	ctx cancelled                       ABORTED
//	{"error":…} as an SSE payload       by its code/text (SERVER if unclassified)
//	unparsable payload, no finish       MALFORMED_RESPONSE
//	finish_reason stop, no block        EMPTY_RESPONSE
//	other finish_reason (e.g. content_filter) the reason upper-cased
//
// The body is read on the consumer's goroutine, inside the iterator; the
// only other goroutines are the watchdog timer's and context.AfterFunc's
// short callbacks, which have ended or been stopped when the iterator
// returns. Stopping the iteration early closes the response.
func (p *Provider) Stream(ctx context.Context, req llm.Request) iter.Seq2[messages.StreamChunk, error] {
	return func(yield func(messages.StreamChunk, error) bool) {
		if f, ok := p.stream(ctx, req, yield); !ok {
			yield(messages.StreamChunk{}, p.redactFailure(f))
		}
	}
}

// stream runs the call. It returns ok=false with the failure to yield, or
// ok=true when the stream ended (finished, or the consumer stopped).
func (p *Provider) stream(ctx context.Context, req llm.Request, yield func(messages.StreamChunk, error) bool) (messages.LlmFailure, bool) {
	body, err := p.requestBody(req)
	if err != nil {
		return p.failure(llm.CodeInvalidRequest, 0, "build request: %v", err), false
	}
	if err := ctx.Err(); err != nil {
		return p.aborted(ctx), false
	}

	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	wd := startWatchdog(p.cfg.IdleTimeout, func() { cancel(errIdle) })
	defer wd.stop()

	hreq, err := http.NewRequestWithContext(sctx, http.MethodPost, p.endpoint, bytes.NewReader(body))
	if err != nil {
		return p.failure(llm.CodeInvalidRequest, 0, "build request: %v", err), false
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	if p.cfg.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+p.cfg.APIKey)
	}
	resp, err := p.cfg.HTTPClient.Do(hreq)
	if err != nil {
		return p.interrupted(ctx, sctx, llm.CodeTransport, "request failed", err), false
	}
	defer resp.Body.Close()
	// A custom RoundTripper need not close the body when the context ends;
	// closing it here unblocks a read on cancel or watchdog either way.
	stopClose := context.AfterFunc(sctx, func() { resp.Body.Close() })
	defer stopClose()
	wd.touch()

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		if err != nil && sctx.Err() != nil {
			return p.interrupted(ctx, sctx, llm.CodeTransport, "read error response", err), false
		}
		return p.httpFailure(resp, b), false
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" {
		// A server that ignored stream: true, or answered an error with
		// 200 (aimock's chaos-malformed does): not an event stream.
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		if err != nil {
			return p.interrupted(ctx, sctx, llm.CodeStreamClosed, "read response", err), false
		}
		if _, ok := parseErrorObject(b); ok {
			return p.streamErrorFailure(b), false
		}
		return p.failure(llm.CodeMalformedResponse, 0, "expected an event stream, got application/json: %s", cut(string(b))), false
	}

	dec := newDecoder(p)
	sse := newSSEReader(resp.Body)
	for {
		ev, err := sse.next()
		if err != nil {
			if errors.Is(err, errEventTooLarge) {
				return p.failure(llm.CodeMalformedResponse, 0, "%v", err), false
			}
			if err == io.EOF {
				return p.failure(llm.CodeStreamClosed, 0, "stream ended before [DONE]"), false
			}
			return p.interrupted(ctx, sctx, llm.CodeStreamClosed, "stream broke before [DONE]", err), false
		}
		wd.touch()
		var chunks []messages.StreamChunk
		var f *messages.LlmFailure
		trimmed := bytes.TrimSpace(ev.data)
		done := string(trimmed) == "[DONE]"
		switch {
		case ev.name == "error":
			ff := p.streamErrorFailure(ev.data)
			f = &ff
		case done:
			chunks, f = dec.done()
		case len(trimmed) == 0:
			continue
		default:
			chunks, f = dec.event(ev.data)
		}
		// Time the consumer spends in yield is not the server's silence.
		wd.pause()
		for _, c := range chunks {
			if !yield(c, nil) {
				return messages.LlmFailure{}, true
			}
		}
		wd.touch()
		if f != nil {
			return *f, false
		}
		if done {
			return messages.LlmFailure{}, true
		}
	}
}

// interrupted classifies an I/O error: the caller's cancel (ABORTED) and
// the watchdog (TIMEOUT) take precedence over what the error itself says,
// since either one is what closed the connection.
func (p *Provider) interrupted(ctx, sctx context.Context, code, what string, err error) messages.LlmFailure {
	switch {
	case ctx.Err() != nil:
		return p.aborted(ctx)
	case errors.Is(context.Cause(sctx), errIdle):
		return p.failure(llm.CodeTimeout, 0, "no data for %v", p.cfg.IdleTimeout)
	}
	return p.failure(code, 0, "%s: %v", what, err)
}

func (p *Provider) aborted(ctx context.Context) messages.LlmFailure {
	cause := context.Cause(ctx)
	if cause == nil {
		cause = ctx.Err()
	}
	return p.failure(llm.CodeAborted, 0, "call cancelled: %v", cause)
}

// watchdog fires when touch has not been called for timeout. touch is a
// single atomic store, cheap enough for every event, rather than a
// Timer.Reset per event: the timer, when it expires, re-arms itself for
// the remaining time if there was activity meanwhile. While paused (the
// consumer holds the chunks of an event), it does not fire; touch resumes
// it.
type watchdog struct {
	timeout time.Duration
	base    time.Time
	last    atomic.Int64 // time.Since(base) of the last touch, in ns
	paused  atomic.Bool
	stopped atomic.Bool
	timer   *time.Timer
	fire    func()
}

func startWatchdog(timeout time.Duration, fire func()) *watchdog {
	w := &watchdog{timeout: timeout, base: time.Now(), fire: fire}
	w.timer = time.AfterFunc(timeout, w.check)
	return w
}

func (w *watchdog) touch() {
	w.last.Store(int64(time.Since(w.base)))
	w.paused.Store(false)
}

func (w *watchdog) pause() { w.paused.Store(true) }

func (w *watchdog) check() {
	if w.stopped.Load() {
		return
	}
	if w.paused.Load() {
		w.timer.Reset(w.timeout)
		return
	}
	idle := time.Since(w.base) - time.Duration(w.last.Load())
	if idle >= w.timeout {
		w.fire()
		return
	}
	w.timer.Reset(w.timeout - idle)
}

func (w *watchdog) stop() {
	w.stopped.Store(true)
	w.timer.Stop()
}
