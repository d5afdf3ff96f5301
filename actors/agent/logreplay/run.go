package logreplay

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/llm/replay"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// Options configures a run. The zero Options is valid.
type Options struct {
	// Override is applied to the recorded script of model output (the
	// parsed replay.override.json; Load reads the one beside a file).
	Override replay.Override
	// Timeout bounds the whole run. Default one minute.
	Timeout time.Duration
}

// defaultTimeout bounds a run when Options.Timeout is zero.
const defaultTimeout = time.Minute

// Result is a run's outcome: Conformant, or the first Divergence.
// Replayed is the log dsh wrote.
type Result struct {
	Conformant bool
	Divergence *Divergence
	Replayed   []session.Event
}

// ErrNoModel is returned for a recording dsh cannot configure a loop for:
// it has no request/header and no assistant output to name a model.
var ErrNoModel = errors.New("logreplay: the recording has no request/header (no provider and model to replay)")

// Run re-runs the recorded session (header and events, as read by
// session.ReadFile or Load) through dsh's agent loop and compares the
// result with the recording. An error means the run could not be set up
// or did not finish within the timeout; a divergence is not an error.
func Run(ctx context.Context, rec *session.File, opts Options) (Result, error) {
	if rec == nil {
		return Result{}, errors.New("logreplay: no recording")
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	p := newPlan(rec.Header, rec.Events)
	provName, model := replay.DefaultName, "replay"
	if p.hasHead {
		provName, model = p.config.Provider, p.config.Model
	}
	recorded, err := replay.Script(rec.Events)
	if err != nil {
		return Result{}, err
	}
	script, err := opts.Override.Apply(recorded)
	if err != nil {
		return Result{}, err
	}
	for k, e := range script {
		switch {
		case e.Kind() != replay.KindHang:
		case k < len(recorded) && recorded[k].Open():
			// The recording shows what was streamed before the hang: its
			// open group serves those chunks, then hangs the same way.
			script[k] = recorded[k]
		case e.ReadyFile() != "":
			script[k] = replay.HangEntry("") // the hang is detected in-process
		}
	}
	// A compaction the recording shows cancelled (docs/replay.md) made a
	// summariser call that never finished: it hangs until cancelled, at
	// its place among the recorded calls.
	for _, at := range p.cutCompactions {
		i := 0
		for i < len(recorded) {
			if o, ok := recorded[i].Origin(); ok && o.FirstSeq > at {
				break
			}
			i++
		}
		recorded = slices.Insert(recorded, i, replay.HangEntry(""))
		script = slices.Insert(script, min(i, len(script)), replay.HangEntry(""))
	}
	var l *session.Log
	if len(p.seed) > 0 {
		l, err = session.NewSeeded(rec.Header, p.seed, 0)
	} else {
		l, err = session.New(rec.Header)
	}
	if err != nil {
		return Result{}, fmt.Errorf("logreplay: %w", err)
	}

	// A dead letter at teardown (a late message to a stopped actor) starts
	// protoactor's throttle goroutine, which lives for the throttle
	// interval (default 1 s); a short interval lets a replay leave no
	// goroutine behind when it returns.
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}), actor.WithDeadLetterThrottleInterval(time.Millisecond))
	defer sys.Shutdown()
	root := sys.Root
	var clock int64
	sp, err := session.Props(session.Config{Log: l, Clock: func() int64 { clock++; return clock }})
	if err != nil {
		return Result{}, err
	}
	sessionPID := root.Spawn(sp)
	defer func() { _ = root.PoisonFuture(sessionPID).Wait() }()

	w := newWatch()
	pr := &probe{w: w, plan: p}
	probePID := root.Spawn(actor.PropsFromProducer(func() actor.Actor { return pr }))
	defer func() { _ = root.PoisonFuture(probePID).Wait() }()
	if _, err := root.RequestFuture(sessionPID, session.Subscribe{Subscriber: probePID}, timeout).Result(); err != nil {
		return Result{}, fmt.Errorf("logreplay: subscribe: %w", err)
	}

	// The foreign events recorded before a call's first chunk, by call: the
	// k-th call dsh makes is the k-th recorded one (an override changes
	// what it serves, not the order).
	before := map[int][]session.Draft{}
	for k, e := range recorded {
		if o, ok := e.Origin(); ok && len(p.preStream[o.FirstSeq]) > 0 {
			before[k] = p.preStream[o.FirstSeq]
		}
	}
	prov := &hangingProvider{inner: replay.New(script, replay.Options{Name: provName}),
		onHang: func() { root.Send(probePID, hung{}) }, before: before,
		appendBefore: func(drafts []session.Draft) error {
			_, err := root.RequestFuture(sessionPID, session.NewAppend(0, drafts...), timeout).Result()
			return err
		}}
	// A cancellation outside a stream (docs/replay.md): the replayed tool,
	// pre-step or retry that the recording shows was cancelled reports it
	// and waits; the probe cancels the turn.
	cancelHere := func() { root.Send(probePID, hung{}) }
	var tools []agent.Tool
	for _, s := range p.tools {
		tools = append(tools, &replayTool{schema: s, plan: p, cancelHere: cancelHere})
	}
	reg, err := agent.NewRegistry(tools...)
	if err != nil {
		return Result{}, fmt.Errorf("logreplay: %w", err)
	}
	hooks := &replayHooks{plan: p, cancelHere: cancelHere}
	cfg := agent.Config{Session: sessionPID, Provider: prov, Model: model, MaxTokens: p.config.MaxTokens,
		System: p.system, Tools: reg, Observer: probePID, Routes: p.route,
		Retry:      llm.RetryPolicy{InitialDelay: time.Millisecond, MaxDelay: time.Millisecond, JitterRatio: -1},
		Hooks:      agent.Hooks{PreStep: hooks, StepEnd: hooks, Request: hooks, RequestError: hooks},
		Compaction: agent.CompactionConfig{NewID: p.nextCompactionID, MaxTokens: p.compactionMaxTokens}}
	ap, err := agent.Props(cfg)
	if err != nil {
		return Result{}, fmt.Errorf("logreplay: %w", err)
	}
	agentPID := root.Spawn(ap)
	pr.setAgent(agentPID)
	defer func() { _ = root.PoisonFuture(agentPID).Wait() }()

	d := &driver{root: root, agent: agentPID, session: sessionPID, probe: probePID, w: w}
	if err := d.run(ctx, p.actions); err != nil {
		return Result{}, err
	}
	r, err := root.RequestFuture(sessionPID, session.QueryEvents{From: 0}, timeout).Result()
	if err != nil {
		return Result{}, fmt.Errorf("logreplay: query events: %w", err)
	}
	got := r.(session.EventsReply).Events.Slice()
	res := Result{Replayed: got}
	res.Divergence = compare(rec.Events, got)
	res.Conformant = res.Divergence == nil
	return res, nil
}

// ---- the provider --------------------------------------------------------

// hangingProvider serves the replay script and reports when a stream
// hangs: a hang entry, or an open recorded group whose chunks ran out.
// Before call k streams, it appends the foreign events recorded between
// the call's request header and its first chunk (before[k]; a plugin's
// own model call, such as the title plugin's session/title-llm-request):
// the agent appends nothing of the call until its first chunk arrives,
// so they land where they were recorded, rather than racing the chunks
// as a delivery from outside would.
type hangingProvider struct {
	inner        *replay.Provider
	onHang       func()
	before       map[int][]session.Draft // read-only once the run starts
	appendBefore func([]session.Draft) error
}

func (p *hangingProvider) Name() string { return p.inner.Name() }

func (p *hangingProvider) Stream(ctx context.Context, req llm.Request) iter.Seq2[messages.StreamChunk, error] {
	k := p.inner.NextCall()
	seq := p.inner.Stream(ctx, req)
	if drafts := p.before[k]; len(drafts) > 0 {
		inner := seq
		seq = func(yield func(messages.StreamChunk, error) bool) {
			if err := p.appendBefore(drafts); err != nil {
				yield(messages.StreamChunk{}, fmt.Errorf("logreplay: append the events recorded before call %d: %w", k, err))
				return
			}
			inner(yield)
		}
	}
	if k >= p.inner.Len() {
		return seq
	}
	e := p.inner.Entry(k)
	if e.Kind() != replay.KindHang && !e.Open() {
		return seq
	}
	n := e.NumChunks()
	return func(yield func(messages.StreamChunk, error) bool) {
		if n == 0 {
			p.onHang()
		}
		i := 0
		for c, err := range seq {
			if !yield(c, err) {
				return
			}
			if err == nil {
				if i++; i == n {
					p.onHang()
				}
			}
		}
	}
}

// ---- tools ---------------------------------------------------------------

// replayTool answers every call with the recorded answer of its call id.
type replayTool struct {
	schema     messages.ToolSchema
	plan       *plan
	cancelHere func()
}

func (t *replayTool) Name() string                  { return t.schema.Name }
func (t *replayTool) Schema() messages.ToolSchema   { return t.schema }
func (t *replayTool) Mode(messages.JSON) agent.Mode { return agent.Exclusive }
func (t *replayTool) Execute(ctx context.Context, call agent.Call) (agent.Result, error) {
	rt, ok := t.plan.takeResult(call.ID)
	if !ok {
		return agent.Result{}, fmt.Errorf("replay: no recorded result for call %q", call.ID)
	}
	for _, d := range rt.emits {
		// A recorded emit was read from a log, so it fits one: a refusal
		// would be a bug, reported as the call's error.
		if err := call.Emit(d); err != nil {
			return agent.Result{}, fmt.Errorf("replay: %w", err)
		}
	}
	if rt.aborted {
		// The recorded tool honoured a cancellation: this one runs until
		// the turn is cancelled, and yields what a cancelled tool does.
		t.cancelHere()
		<-ctx.Done()
		return agent.Result{}, ctx.Err()
	}
	r := agent.Result{Error: rt.result.Error, Meta: rt.result.Meta, AdditionalContexts: rt.contexts}
	m := rt.result.Message
	if m.NumBlocks() == 1 && m.Block(0).Type() == messages.BlockToolResult {
		b := m.Block(0)
		r.Content, r.IsError = b.Content(), b.IsError()
	} else {
		r.Content = m.Content()
	}
	return r, nil
}

// ---- hooks ---------------------------------------------------------------

type replayHooks struct {
	plan       *plan
	cancelHere func()
}

// PreStep contributes the foreign events recorded before the step (as
// the decision's preface) and the recorded step's enter batch. Where the
// recording has no such step and its turn ended aborted, the turn was
// cancelled here: the hook waits for the cancellation.
func (h *replayHooks) PreStep(ctx context.Context, in agent.PreStepInput) (agent.PreStepDecision, error) {
	k := stepKey{in.Turn, in.Step}
	if r, ok := h.plan.turnEnds[in.Turn]; ok && r.Kind == session.EndAborted && !h.plan.steps[k] {
		h.cancelHere()
		<-ctx.Done()
		return agent.PreStepDecision{}, ctx.Err()
	}
	return agent.PreStepDecision{Preface: h.plan.preStep[k], Entries: h.plan.enter(k, in.Messages)}, nil
}

// StepEnd contributes what the recording has at the boundary after the
// step, in order: the plugins' log-only events, inserts and
// cancellations.
func (h *replayHooks) StepEnd(_ context.Context, in agent.StepEndInput) (agent.StepEndDecision, error) {
	items := h.plan.stepEnd[stepKey{in.Turn, in.Step}]
	ops := make([]agent.StepEndOp, 0, len(items))
	for _, it := range items {
		ops = append(ops, it.op)
	}
	return agent.StepEndDecision{Ops: ops}, nil
}

// Request returns the recorded config of the step.
func (h *replayHooks) Request(in agent.RequestInput) (messages.CallConfig, error) {
	if c, ok := h.plan.stepConfig[stepKey{in.Turn, in.Step}]; ok {
		return c, nil
	}
	return in.Seed, nil
}

// RequestError retries where the recording retried, and only there.
func (h *replayHooks) RequestError(in agent.RequestErrorInput) (agent.RequestErrorDecision, error) {
	k := retryKey{in.Turn, in.Step, int64(in.Attempt)}
	if h.plan.held[k] {
		// Cancelled during this retry's backoff: the backoff lasts until
		// the probe's cancellation arrives.
		h.cancelHere()
		return agent.DecideRetryHeld, nil
	}
	if h.plan.retries[k] {
		return agent.DecideRetry, nil
	}
	return agent.DecideFail, nil
}

// ---- the probe: log length, idleness, cancels ----------------------------

type watch struct {
	mu     sync.Mutex
	n      int   // events committed
	turn   int64 // last turn/start seen
	idle   uint64
	change chan struct{}
}

func newWatch() *watch { return &watch{change: make(chan struct{})} }

func (w *watch) update(fn func()) {
	w.mu.Lock()
	fn()
	close(w.change)
	w.change = make(chan struct{})
	w.mu.Unlock()
}

// wait blocks until cond holds (checked under the lock) or ctx is done.
func (w *watch) wait(ctx context.Context, cond func() bool) error {
	for {
		w.mu.Lock()
		ok, ch := cond(), w.change
		w.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

type (
	hung    struct{}
	askIdle struct{ ref uint64 }
)

// probe is subscribed to the session and is the agent's observer: it
// keeps the watch, asks the agent for idleness, and cancels a hung turn.
type probe struct {
	w     *watch
	plan  *plan
	mu    sync.Mutex
	agent *actor.PID
	// cancelled is the last turn the probe cancelled (Receive only).
	cancelled int64
}

func (p *probe) setAgent(pid *actor.PID) {
	p.mu.Lock()
	p.agent = pid
	p.mu.Unlock()
}

func (p *probe) agentPID() *actor.PID {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.agent
}

func (p *probe) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case session.EventsCommitted:
		evs := m.Events.Slice()
		if len(evs) == 0 {
			return
		}
		p.w.update(func() {
			for _, e := range evs {
				if ts, ok := e.Payload().(session.TurnStart); ok {
					p.w.turn = ts.Turn
				}
			}
			p.w.n = int(evs[len(evs)-1].Seq()) + 1
		})
	case askIdle:
		if a := p.agentPID(); a != nil {
			ctx.Request(a, agent.WaitIdle{Ref: m.ref})
		}
	case agent.Idle:
		p.w.update(func() { p.w.idle = max(p.w.idle, m.Ref) })
	case hung:
		p.w.mu.Lock()
		turn := p.w.turn
		p.w.mu.Unlock()
		if turn == p.cancelled {
			return // parallel tools each report the one cancellation
		}
		p.cancelled = turn
		cause := session.CancelCause{Kind: session.CauseUser}
		if r, ok := p.plan.turnEnds[turn]; ok && r.Kind == session.EndAborted {
			cause = r.Cause
		}
		if a := p.agentPID(); a != nil {
			ctx.Send(a, agent.Cancel{Cause: cause})
		}
	}
}

// ---- the driver ------------------------------------------------------------

type driver struct {
	root                  *actor.RootContext
	agent, session, probe *actor.PID
	w                     *watch
	refs                  uint64
}

func (d *driver) waitIdle(ctx context.Context, orLen int) error {
	d.refs++
	ref := d.refs
	d.root.Send(d.probe, askIdle{ref: ref})
	return d.w.wait(ctx, func() bool { return d.w.idle >= ref || (orLen >= 0 && d.w.n >= orLen) })
}

func (d *driver) run(ctx context.Context, actions []action) error {
	for _, a := range actions {
		var err error
		if a.idle {
			err = d.waitIdle(ctx, -1)
		} else {
			err = d.waitIdle(ctx, a.pos)
		}
		if err != nil {
			return fmt.Errorf("logreplay: waiting to send the input recorded at %d: %w", a.pos, err)
		}
		if err := d.perform(ctx, a); err != nil {
			return err
		}
	}
	if err := d.waitIdle(ctx, -1); err != nil {
		return fmt.Errorf("logreplay: waiting for the agent to finish: %w", err)
	}
	return nil
}

func (d *driver) perform(ctx context.Context, a action) error {
	timeout := time.Minute
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if a.kind == appendForeign {
		if _, err := d.root.RequestFuture(d.session, session.NewAppend(0, a.draft), timeout).Result(); err != nil {
			return fmt.Errorf("logreplay: append the event recorded at %d: %w", a.pos, err)
		}
		return nil
	}
	for _, m := range a.messages {
		var msg any
		switch a.kind {
		case deliverFollowup:
			msg = agent.Followup{Message: m}
		case deliverSteer:
			msg = agent.Steer{Message: m}
		default:
			msg = agent.Inject{Message: m}
		}
		// A refused send (SendFailed) shows up as a divergence.
		if _, err := d.root.RequestFuture(d.agent, msg, timeout).Result(); err != nil {
			return fmt.Errorf("logreplay: send the input recorded at %d: %w", a.pos, err)
		}
	}
	return nil
}
