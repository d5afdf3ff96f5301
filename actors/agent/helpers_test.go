package agent

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/testutil"
	"github.com/dshgo/dsh/messages"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const waitFor = 5 * time.Second

// entry is one scripted model response (the reference's mock adapter).
type entry struct {
	chunks []messages.StreamChunk
	hang   bool // after the chunks, hang until cancelled
	err    error
	gate   <-chan struct{} // when set, the chunks wait for it to close
}

// textResponse: block-start, one text-delta per character, block-end,
// usage {10, len}, finish stop.
func textResponse(s string) entry {
	cs := []messages.StreamChunk{messages.BlockStartChunk(0, messages.BlockText)}
	for _, r := range s {
		cs = append(cs, messages.TextDeltaChunk(0, string(r)))
	}
	cs = append(cs, messages.BlockEndChunk(0, messages.TextBlock(s)),
		messages.UsageChunk(messages.TokenUsage{InputTokens: 10, OutputTokens: int64(len(s))}),
		finishChunk(messages.FinishStop))
	return entry{chunks: cs}
}

type tc struct{ id, name, args string }

// toolCallResponse: each call's arguments in two deltas, finish tool-calls.
func toolCallResponse(calls ...tc) entry {
	var cs []messages.StreamChunk
	for i, c := range calls {
		h := len(c.args) / 2
		cs = append(cs, messages.BlockStartChunk(i, messages.BlockToolCall),
			messages.NamedToolCallDeltaChunk(i, c.id, c.name, c.args[:h]),
			messages.ToolCallDeltaChunk(i, c.id, c.args[h:]),
			messages.BlockEndChunk(i, messages.ToolCallBlock(c.id, c.name, c.args)))
	}
	cs = append(cs, messages.UsageChunk(messages.TokenUsage{InputTokens: 10, OutputTokens: 5}),
		finishChunk(messages.FinishToolCalls))
	return entry{chunks: cs}
}

func finishChunk(k messages.FinishKind) messages.StreamChunk {
	return messages.FinishChunk(messages.FinishReason{Kind: k}, messages.JSON{})
}

func failFinish(f messages.LlmFailure) messages.StreamChunk {
	return messages.FinishChunk(messages.FinishReason{Kind: messages.FinishError, Failure: f}, messages.JSON{})
}

// mockProvider serves scripted entries in order ("ok" once they run out),
// records every request, and checks at every dispatch that the request
// rebuilds from the session log (docs/session-log.md#invariants): at the
// moment Stream is called nothing of the attempt is logged yet, so the
// session's derived messages and folded header are exactly the prefix before
// its first chunk.
type mockProvider struct {
	mu       sync.Mutex
	script   []entry
	requests []llm.Request
	started  chan int // receives the call index when the call starts
	check    func(llm.Request) error
	failures []string
	inner    llm.Provider // when set, serves every call (the script is unused)
}

func newMock(script ...entry) *mockProvider {
	return &mockProvider{script: script, started: make(chan int, 64)}
}

func (p *mockProvider) Name() string { return "mock" }

func (p *mockProvider) Stream(ctx context.Context, req llm.Request) iter.Seq2[messages.StreamChunk, error] {
	return func(yield func(messages.StreamChunk, error) bool) {
		p.mu.Lock()
		i := len(p.requests)
		p.requests = append(p.requests, req)
		e := textResponse("ok")
		if len(p.script) > 0 {
			e, p.script = p.script[0], p.script[1:]
		}
		check := p.check
		p.mu.Unlock()
		if check != nil {
			if err := check(req); err != nil {
				p.mu.Lock()
				p.failures = append(p.failures, fmt.Sprintf("request %d: %v", i, err))
				p.mu.Unlock()
			}
		}
		if p.inner != nil {
			for c, err := range p.inner.Stream(ctx, req) {
				if !yield(c, err) {
					return
				}
			}
			return
		}
		p.started <- i
		if e.gate != nil {
			select {
			case <-e.gate:
			case <-ctx.Done():
				return
			}
		}
		for _, c := range e.chunks {
			if !yield(c, nil) {
				return
			}
		}
		if e.hang {
			<-ctx.Done()
			return
		}
		if e.err != nil {
			yield(messages.StreamChunk{}, e.err)
		}
	}
}

func (p *mockProvider) Requests() []llm.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.requests)
}

// harness is one session with its agent.
type harness struct {
	t       *testing.T
	sys     *actor.ActorSystem
	session *actor.PID
	agent   *actor.PID
	mock    *mockProvider
	refs    uint64

	logs      *logCapture        // what the actor system logged at error level
	observers []session.Observer // session observers, set by options
	cfg       Config             // the agent's configuration
	agentPID  atomic.Pointer[actor.PID]
	props     func(Config) *actor.Props // replaces Props(cfg) when set, by an option
}

type option func(*harness, *Config)

func testHeader() session.Header {
	return session.Header{ID: "agent-test", CreatedAt: 1, Cwd: "/work/project"}
}

// newHarness starts a session over l (a fresh log when nil) and an agent.
func newHarness(t *testing.T, mock *mockProvider, l *session.Log, opts ...option) *harness {
	t.Helper()
	if l == nil {
		var err error
		l, err = session.New(testHeader())
		require.NoError(t, err)
	}
	// A dead letter (a cancel racing a stream that just ended) starts a
	// throttle goroutine that lives one interval: QuietSystem keeps it short
	// for goleak.
	h := &harness{t: t, mock: mock, logs: &logCapture{}}
	sys := testutil.QuietSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(h.logs) }))
	h.sys = sys
	cfg := Config{Provider: mock, Model: "mock-1",
		Retry: llm.RetryPolicy{InitialDelay: time.Millisecond, MaxDelay: time.Millisecond, JitterRatio: -1}}
	for _, o := range opts {
		o(h, &cfg)
	}
	n := int64(0)
	sp, err := session.Props(session.Config{Log: l, Clock: func() int64 { n++; return 1_700_000_000_000 + n },
		Observers: h.observers})
	require.NoError(t, err)
	h.session = sys.Root.Spawn(sp)
	cfg.Session = h.session
	h.cfg = cfg
	ap, err := Props(cfg)
	require.NoError(t, err)
	if h.props != nil {
		ap = h.props(cfg)
	}
	mock.check = h.checkReconstruction
	h.agent = sys.Root.Spawn(ap)
	h.agentPID.Store(h.agent)
	t.Cleanup(func() {
		require.NoError(t, sys.Root.PoisonFuture(h.agent).Wait())
		require.NoError(t, sys.Root.PoisonFuture(h.session).Wait())
		sys.Shutdown()
		mock.mu.Lock()
		defer mock.mu.Unlock()
		require.Empty(t, mock.failures, "request reconstruction")
	})
	return h
}

func (h *harness) checkReconstruction(req llm.Request) error {
	if req.Purpose() == purposeCompaction {
		return nil // a summariser call replays a part of the log, plus its instruction
	}
	msgs, err := h.sys.Root.RequestFuture(h.session, session.QueryMessages{}, waitFor).Result()
	if err != nil {
		return err
	}
	want := msgs.(session.MessagesReply).Messages.Slice()
	got := make([]messages.Message, 0, req.NumMessages())
	for _, m := range req.Messages() {
		got = append(got, m)
	}
	if !slices.EqualFunc(got, want, messages.Message.Equal) {
		return fmt.Errorf("messages %v, log derives %v", got, want)
	}
	hr, err := h.sys.Root.RequestFuture(h.session, session.QueryHeader{}, waitFor).Result()
	if err != nil {
		return err
	}
	hdr := hr.(session.HeaderReply)
	if !hdr.HasRequest || !hdr.Request.Config.Equal(req.Config()) || hdr.Request.System != req.System() ||
		!slices.EqualFunc(hdr.Request.Tools(), req.Tools(), func(a, b messages.ToolSchema) bool {
			return a.JSON().Equal(b.JSON())
		}) {
		return fmt.Errorf("config %v differs from the folded header %v", req.Config(), hdr.Request)
	}
	return nil
}

func user(t *testing.T, text string) messages.Message {
	t.Helper()
	m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(text)}, messages.UserSource())
	require.NoError(t, err)
	return m
}

func (h *harness) ask(msg any) any {
	h.t.Helper()
	res, err := h.sys.Root.RequestFuture(h.agent, msg, waitFor).Result()
	require.NoError(h.t, err)
	return res
}

func (h *harness) send(kind, text string) messages.Message {
	h.t.Helper()
	m := user(h.t, text)
	h.refs++
	var msg any
	switch kind {
	case "followup":
		msg = Followup{Ref: h.refs, Message: m}
	case "steer":
		msg = Steer{Ref: h.refs, Message: m}
	default:
		msg = Inject{Ref: h.refs, Message: m}
	}
	r := h.ask(msg)
	require.IsType(h.t, Sent{}, r)
	return m
}

func (h *harness) followup(text string) messages.Message { return h.send("followup", text) }

func (h *harness) cancel(kind session.CauseKind) {
	h.sys.Root.Send(h.agent, Cancel{Cause: session.CancelCause{Kind: kind}})
}

func (h *harness) waitIdle() {
	h.t.Helper()
	h.refs++
	require.Equal(h.t, Idle{Ref: h.refs}, h.ask(WaitIdle{Ref: h.refs}))
}

func (h *harness) events() []session.Event {
	h.t.Helper()
	res, err := h.sys.Root.RequestFuture(h.session, session.QueryEvents{From: 0}, waitFor).Result()
	require.NoError(h.t, err)
	return res.(session.EventsReply).Events.Slice()
}

// eventually polls the log until cond holds (with a deadline).
func (h *harness) eventually(cond func([]session.Event) bool) {
	h.t.Helper()
	require.Eventually(h.t, func() bool { return cond(h.events()) }, waitFor, time.Millisecond)
}

func (h *harness) waitStarted() int {
	h.t.Helper()
	select {
	case i := <-h.mock.started:
		return i
	case <-time.After(waitFor):
		h.t.Fatal("no model call started")
		return -1
	}
}

func types(es []session.Event) []session.EventType {
	out := make([]session.EventType, len(es))
	for i, e := range es {
		out[i] = e.Type()
	}
	return out
}

func ofType(es []session.Event, typ ...session.EventType) []session.Event {
	var out []session.Event
	for _, e := range es {
		if slices.Contains(typ, e.Type()) {
			out = append(out, e)
		}
	}
	return out
}

func turnEnds(es []session.Event) []session.TurnEndReason {
	var out []session.TurnEndReason
	for _, e := range ofType(es, session.TypeTurnEnd) {
		out = append(out, e.Payload().(session.TurnEnd).Reason)
	}
	return out
}

func texts(m messages.Message) string {
	var s string
	for b := range m.Blocks() {
		s += b.Text()
	}
	return s
}

func derive(es []session.Event) []messages.Message { return session.DeriveFromScratch(es) }

// fakeTool is a tool made of a function.
type fakeTool struct {
	name string
	mode Mode
	fn   func(ctx context.Context, c Call) (Result, error)
}

func (f fakeTool) Name() string { return f.name }
func (f fakeTool) Schema() messages.ToolSchema {
	return messages.ToolSchema{Name: f.name, Description: f.name, Parameters: messages.MustParseJSON(`{"type":"object"}`)}
}
func (f fakeTool) Mode(messages.JSON) Mode { return f.mode }
func (f fakeTool) Execute(ctx context.Context, c Call) (Result, error) {
	if f.fn == nil {
		return Result{Content: []messages.ContentBlock{messages.TextBlock(f.name + " ran")}}, nil
	}
	return f.fn(ctx, c)
}

func withTools(t *testing.T, tools ...Tool) option {
	r, err := NewRegistry(tools...)
	require.NoError(t, err)
	return func(_ *harness, c *Config) { c.Tools = r }
}

type preStepFunc func(ctx context.Context, in PreStepInput) (PreStepDecision, error)

func (f preStepFunc) PreStep(ctx context.Context, in PreStepInput) (PreStepDecision, error) {
	return f(ctx, in)
}

func withPreStep(hook PreStepHook) option {
	return func(_ *harness, c *Config) { c.Hooks.PreStep = hook }
}

// observer collects StatusChanged notifications.
type observer struct {
	pid *actor.PID
	ch  chan Status
}

// withObserver spawns o in the harness's system and makes it the
// agent's observer.
func withObserver(t *testing.T, o *observer) option {
	return func(h *harness, c *Config) {
		sys := h.sys
		o.pid = sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
			if m, ok := ctx.Message().(StatusChanged); ok {
				o.ch <- m.Status
			}
		}))
		c.Observer = o.pid
		t.Cleanup(func() { require.NoError(t, sys.Root.PoisonFuture(o.pid).Wait()) })
	}
}

// statuses returns the first n statuses, then checks no more arrived.
func (o *observer) statuses(n int) []Status {
	var out []Status
	for range n {
		select {
		case s := <-o.ch:
			out = append(out, s)
		case <-time.After(waitFor):
			return out
		}
	}
	select {
	case s := <-o.ch:
		out = append(out, s)
	default:
	}
	return out
}

// logCapture is a slog handler that keeps the records of level error and
// above (the rest is dropped, as the quiet system does). Safe for
// concurrent use.
type logCapture struct {
	mu      sync.Mutex
	records []slog.Record // guarded by mu
}

func (c *logCapture) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }

func (c *logCapture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.records = append(c.records, r.Clone())
	return nil
}

func (c *logCapture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *logCapture) WithGroup(string) slog.Handler      { return c }

// errors returns the messages logged so far, each followed by its
// attributes as key=value.
func (c *logCapture) errors() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range c.records {
		s := r.Message
		r.Attrs(func(a slog.Attr) bool {
			s += " " + a.String()
			return true
		})
		out = append(out, s)
	}
	return out
}
