package agent

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// PreStepInput is what the pre-step hook sees (agent/pre-step).
type PreStepInput struct {
	Turn, Step int64
	// Messages is the claimed batch; the hook owns the slice.
	Messages []messages.Message
	// Snapshot, when not zero, is the runtime-context snapshot
	// (docs/agent-loop.md#runtime-context; Config.RuntimeContext) the default
	// decision enters after Messages. The agent appends it to an entering
	// decision's batch unless the decision already carries it (same id): a
	// hook that wants it elsewhere in the batch puts it there. A rejecting
	// decision drops it, and a decision that enters nothing at the first step
	// does not open a step for it alone; the next pre-step offers it again.
	Snapshot messages.Message
}

// PreStepHook decides what enters a step
// (docs/agent-loop.md#turns-and-steps). It runs in a goroutine owned by the
// agent and may block; ctx is cancelled when the turn is aborted or the agent
// stops. An error ends the turn in error.
type PreStepHook interface {
	PreStep(ctx context.Context, in PreStepInput) (PreStepDecision, error)
}

// TurnStoppingInput is what the turn-stopping hook sees. Steer queues
// steering that forces another step (it reaches the inbox before the
// hook's end is handled).
type TurnStoppingInput struct {
	Turn  int64
	Steer func(messages.Message)
}

// TurnStoppingHook runs when a turn is about to end with nothing owed
// (docs/agent-loop.md#turns-and-steps). It runs in a goroutine owned by the
// agent and may block; ctx is cancelled on abort or stop. An error ends the
// turn in error.
type TurnStoppingHook interface {
	TurnStopping(ctx context.Context, in TurnStoppingInput) error
}

// RequestHook is agent/request: it may replace the call config seed (to
// switch models). It is called synchronously inside the agent's Receive
// and must not block.
type RequestHook interface {
	Request(in RequestInput) (messages.CallConfig, error)
}

// RequestErrorHook is agent/request-error: it decides whether a failed
// call is retried. Called synchronously inside Receive; must not block.
type RequestErrorHook interface {
	RequestError(in RequestErrorInput) (RequestErrorDecision, error)
}

// Hooks are the extension points an embedder registers
// (docs/agent-loop.md#extension-points). Any may be nil. Implementations must
// be safe for concurrent use.
type Hooks struct {
	PreStep      PreStepHook
	TurnStopping TurnStoppingHook
	// StepEnd runs at each step boundary of a turn that goes on; see
	// StepEndHook.
	StepEnd      StepEndHook
	Request      RequestHook
	RequestError RequestErrorHook
	// PreExecute, Approver and PostExecute are the tool pipeline
	// (tools/pre-execute, tools/post-execute); see ToolPreExecuteHook.
	PreExecute  ToolPreExecuteHook
	Approver    ToolApprover
	PostExecute ToolPostExecuteHook
}

// ErrDisposed refuses a send to a disposed agent.
var ErrDisposed = errors.New("agent: disposed")

// Config configures an agent actor. Session and Provider are required,
// and so is Model.
type Config struct {
	// Session is the session actor the agent writes to.
	Session *actor.PID
	// Inbox configures the inbox actor the agent spawns as its child.
	Inbox inbox.Config
	// Provider makes the model calls; its Name is the request's provider.
	Provider llm.Provider
	// Model is the model id of every request (unless a Request hook
	// switches it).
	Model string
	// MaxTokens, when present, seeds the request config.
	MaxTokens messages.OptInt
	// System is the system prompt ("" for none).
	System string
	// Tools are the tools offered to the model (nil: none).
	Tools *Registry
	// MaxParallelTools bounds the parallel pool. Default 10.
	MaxParallelTools int
	// Retry is the retry policy of failed model calls (zero: defaults).
	Retry llm.RetryPolicy
	// NoRetry disables retries (unless a RequestError hook asks).
	NoRetry bool
	// Routes describes each provider/model route: the fields its adapter
	// materialises (marked adapterDefaults in the request header) and its
	// context window (logged in request/context). Nil: nothing is
	// materialised and no window is known. Called inside Receive; must
	// not block. A panic is recovered and ends the turn in error.
	Routes func(provider, model string) Route
	// StreamTimeout bounds one model call (llm.StreamConfig.Timeout).
	StreamTimeout time.Duration
	// Compaction configures compaction (docs/agent-loop.md#compaction):
	// context-overflow, pressure (needs a route with a ContextWindow) and
	// manual (Compact). The zero value enables it with the defaults.
	Compaction CompactionConfig
	// RuntimeContext holds the dynamic prompt sections (sandbox and approval
	// policy, and so on) that travel as a runtime-context snapshot rather
	// than in the system prompt (docs/agent-loop.md#runtime-context): a
	// plugin-sourced user/message entered with a step's input when its text
	// differs from the last snapshot still on the surface. SetRuntimeContext
	// replaces it while the agent lives. Empty (the default): no snapshot is
	// ever sent, until a SetRuntimeContext.
	RuntimeContext RuntimeContext
	// Hooks are the embedder's hooks.
	Hooks Hooks
	// Observer, when set, receives StatusChanged and TurnFailed.
	Observer *actor.PID
}

// Validate reports a missing session, provider or model.
func (c Config) Validate() error {
	if c.Session == nil {
		return errNoSession
	}
	_, err := c.prepare()
	return err
}

var errNoSession = errors.New("agent: config needs a session PID")

// prepare checks everything but Session and derives the core's
// configuration, validated.
func (c Config) prepare() (*driverShared, error) {
	switch {
	case c.Provider == nil:
		return nil, errors.New("agent: config needs a provider")
	case c.Model == "":
		return nil, errors.New("agent: config needs a model")
	}
	dc, err := c.driverConfig()
	if err != nil {
		return nil, err
	}
	return newDriverShared(dc)
}

// driverConfig derives the core's configuration. It asks the tools for
// their schemas and the provider for its name, which is the embedder's
// code: a panic is an error here (Props refuses the config), and Props
// derives it once, so that the actor never calls them inside Receive (a
// panic there would restart the agent, and again at every restart).
func (c Config) driverConfig() (dc DriverConfig, err error) {
	defer recoverCallback("configuration", &err)
	dc = DriverConfig{Provider: c.Provider.Name(), Model: c.Model, MaxTokens: c.MaxTokens, System: c.System,
		Tools: c.Tools.Schemas(), Modes: c.Tools.modeOf, MaxParallelTools: c.MaxParallelTools, Retry: c.Retry,
		NoRetry: c.NoRetry, PreStep: c.Hooks.PreStep != nil, TurnStopping: c.Hooks.TurnStopping != nil,
		StepEnd: c.Hooks.StepEnd != nil,
		Routes:  c.Routes, Compaction: c.Compaction, RuntimeContext: c.RuntimeContext}
	if h := c.Hooks.Request; h != nil {
		dc.Request = func(in RequestInput) (cfg messages.CallConfig, err error) {
			defer recoverHook("request", &err)
			return h.Request(in)
		}
	}
	if h := c.Hooks.RequestError; h != nil {
		dc.RequestError = func(in RequestErrorInput) (dec RequestErrorDecision, err error) {
			defer recoverHook("request-error", &err)
			return h.RequestError(in)
		}
	}
	return dc, nil
}

// recoverHook turns a hook's panic into its error (deferred by the
// callers of every hook): the turn ends in error, as for a returned
// error, and the agent lives on. A contained panic is better than a
// restart, which interrupts the turn and loses in-flight replies.
func recoverHook(name string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("agent: %s hook panicked: %v", name, r)
	}
}

// Props returns the props of an agent actor. Props that make many agents
// of one configuration (a host's sessions) use a Template instead.
func Props(cfg Config) (*actor.Props, error) {
	if cfg.Session == nil {
		return nil, errNoSession
	}
	t, err := NewTemplate(cfg)
	if err != nil {
		return nil, err
	}
	return t.Props(cfg.Session)
}

// Template is an agent configuration prepared once for many agents: it is
// validated and its driver configuration derived once, and every agent
// made from it (Template.Props) reads it, shared, instead of holding
// copies of its own (over a kilobyte per agent, which a host with
// thousands of idle resident sessions paid for each). A Template is
// immutable and safe for concurrent use.
type Template struct {
	cfg    Config // Session unset: each agent names its own
	driver *driverShared
}

// NewTemplate prepares cfg for Template.Props. cfg.Session is not used
// (each agent's is given to Props); the rest is checked as Validate does.
func NewTemplate(cfg Config) (*Template, error) {
	cfg.Session = nil
	ds, err := cfg.prepare()
	if err != nil {
		return nil, err
	}
	return &Template{cfg: cfg, driver: ds}, nil
}

// Props returns the props of an agent actor of t writing to the session
// actor session.
func (t *Template) Props(session *actor.PID) (*actor.Props, error) {
	if session == nil {
		return nil, errNoSession
	}
	lin := &lineage{}
	return actor.PropsFromProducer(func() actor.Actor { return newAgentActor(t, session, lin) }), nil
}

func newAgentActor(t *Template, session *actor.PID, lin *lineage) *agentActor {
	return &agentActor{cfg: &t.cfg, driver: t.driver, session: session, lin: lin}
}

// refShift splits a ref into its incarnation (the high bits) and a
// counter. Every incarnation of an agent actor (the first spawn and each
// restart after a panic) draws a fresh epoch, and every ref it makes
// (its own and its driver's) carries it: a reply, chunk, hook or tool
// result, or timer tick meant for a dead incarnation reaches the new
// one (same PID) and is dropped by its epoch instead of being taken for
// one of its own.
const refShift = 40

// lineage is shared by the incarnations made by one Props: the epoch
// counter, and what an incarnation that is restarting hands to the next
// one (by PID, as a Props may spawn several agents).
type lineage struct {
	mu      sync.Mutex
	epochs  uint64
	carried map[string]carried // nil until a restart hands something over
}

// carried is what survives a restart: the callers of forwarded sends
// still waiting for the inbox's answer (the answer, if the old inbox
// gave one before it was stopped, is already in the mailbox).
type carried struct {
	sends map[uint64]caller
}

func (l *lineage) nextEpoch() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.epochs++
	return l.epochs
}

func (l *lineage) put(id string, c carried) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.carried == nil {
		l.carried = map[string]carried{}
	}
	l.carried[id] = c
}

func (l *lineage) take(id string) carried {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.carried[id]
	delete(l.carried, id)
	return c
}

// errRestarted answers the requests a crashed incarnation held that the
// next one cannot complete (a Compact, a maintenance task).
var errRestarted = errors.New("agent: restarted after a crash")

// Messages the shell sends itself from the goroutines and timers it owns.
type (
	toolDone struct {
		ref    uint64
		result Result
	}
	toolEmitted struct {
		ref   uint64
		draft session.Draft
	}
	preStepDone struct {
		ref uint64
		dec PreStepDecision
		err error
	}
	turnStoppingDone struct {
		ref uint64
		err error
	}
	stepEndDone struct {
		ref uint64
		dec StepEndDecision
		err error
	}
	stepOpDone struct{ ref uint64 } // the inbox answered a step-end operation
	retryTick  struct{ epoch, gen uint64 }
	compactReq struct{ ref uint64 } // a Compact, by the driver ref of its reply
	maintDone  struct {             // the maintenance task returned
		epoch uint64
		err   error
		stack []byte // the panic's stack when the task panicked
	}
	contextPushed struct{ ref uint64 } // the inbox answered a context push
)

type caller struct {
	pid *actor.PID
	ref uint64
}

// agentActor is the shell around Driver. Everything is touched only in
// Receive, except what the goroutines capture (immutable values, the
// root context, and wg, which is safe for concurrent use).
type agentActor struct {
	cfg     *Config       // the Template's, shared: read only (its Session is nil)
	driver  *driverShared // the Template's core configuration, shared
	session *actor.PID    // the session actor the agent writes to
	lin     *lineage
	epoch   uint64
	d       *Driver
	inbox   *actor.PID
	self    *actor.PID
	root    *actor.RootContext

	refs        uint64
	headerRef   uint64
	pendingRef  uint64
	header      session.Header
	past        []session.Event
	pendingSeen bool
	pendingTurn int
	pendingStep int
	booted      bool
	buffered    []any // inputs that arrived before boot, replayed in order
	repairRef   uint64
	repairing   bool // the closers of an open turn are appended, not yet seen
	subscribed  bool

	sends    map[uint64]caller // forwarded sends by inbox ref
	pushes   map[uint64]uint64 // context pushes: the driver's ref by inbox ref
	stepOps  map[uint64]uint64 // step-end inbox operations: the driver's ref by inbox ref
	waiters  []caller
	disposes []caller          // Dispose requests, answered once idle
	compacts map[uint64]caller // Compact requests by driver ref
	maint    *caller           // the running maintenance task's caller
	stream   *actor.PID

	stopped      bool            // Stopping or Restarting came: every signal made is cancelled
	signal       context.Context // the running turn's abort signal; nil until needed (abortSignal)
	signalCancel context.CancelFunc
	timer        *time.Timer
	wg           sync.WaitGroup // tool and hook goroutines

	chunks chunkAppends
}

// chunkAppends coalesces the driver's chunk appends (see perform). A
// model streams faster than one append can make the round trip to the
// session, so while a chunk Append is unanswered the chunks after it are
// held, and the next answer sends them all as one Append: one commit, one
// EventsCommitted per subscriber and one reply for the lot instead of one
// each. The driver still sees one append and one acknowledgement per
// chunk: its refs are kept, and the batch's answer is split back into
// one-event views, in order.
//
// Order is kept: chunks are held only behind another chunk Append in
// flight, and whatever else the driver asks for (an append, a claim, a
// cancel, a status) and every send forwarded to the inbox first sends
// what is held. Nothing held is left behind: something is held only while
// a chunk Append is in flight, and its answer sends it.
//
// Rejected alternative: a Driver that batches its own chunk drafts. The
// core's effects per input are its tested contract (one append per
// chunk, acknowledged with the chunk's seq); coalescing is transport.
type chunkAppends struct {
	heldRefs   []uint64        // the driver's refs of the held chunks
	heldDrafts []session.Draft // their drafts, one each
	flight     []chunkFlight   // chunk Appends sent and unanswered, oldest first
}

// chunkFlight is a chunk Append sent to the session: ref is its ref; refs
// are the driver's refs it stands for, nil when it is the driver's own
// append of one chunk (sent under the driver's ref).
type chunkFlight struct {
	ref  uint64
	refs []uint64
}

func (a *agentActor) nextRef() uint64 {
	a.refs++
	return a.refs
}

// Receive never blocks, except in Stopped, which joins the tool and hook
// goroutines it has just cancelled (tools must honour their context).
func (a *agentActor) Receive(ctx actor.Context) {
	if a.stale(ctx.Message()) {
		return
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.start(ctx)
	case *actor.Stopping:
		a.stop()
		if a.timer != nil {
			a.timer.Stop()
		}
		ctx.Send(a.session, session.Unsubscribe{Subscriber: ctx.Self()})
	case *actor.Stopped:
		a.wg.Wait()
	case *actor.Restarting:
		a.restarting(ctx)
	case *actor.Terminated:
	case session.HeaderReply:
		if m.Ref == a.headerRef {
			a.header = m.Session
		}
	case session.EventsCommitted:
		a.committed(ctx, m.Events)
	case session.Subscribed:
		if a.d == nil && !a.subscribed {
			a.subscribed = true
			a.repair(ctx)
			a.build(ctx)
		}
	case session.AppendReply:
		if m.Delivered {
			// The reply stands for the subscription's EventsCommitted
			// (the driver's appends are Delivering): mirrored first, as
			// that message would have been.
			a.committed(ctx, m.Events)
		}
		if m.Ref == a.repairRef {
			return // the closers are taken from the subscription
		}
		if !a.chunkReply(ctx, m) {
			a.input(ctx, m)
		}
	case session.AppendFailed:
		if m.Ref == a.repairRef {
			// Let the next incarnation try again.
			panic(errors.Join(errors.New("agent: crash repair refused"), m.Err))
		}
		a.input(ctx, m)
	case inbox.Pending:
		if m.Ref == a.pendingRef {
			a.pendingSeen = true
			a.pendingTurn, a.pendingStep = len(m.NextTurn()), len(m.NextStep())
			a.boot(ctx)
		}
	case inbox.Inserted, inbox.Discarded, inbox.ClaimedNotice:
		// Before the boot query's answer, the counts it carries already
		// include these changes.
		if a.pendingSeen {
			if !a.booted {
				a.buffered = append(a.buffered, m)
				return
			}
			a.handle(ctx, m)
		}
	case Followup:
		a.forward(ctx, m.Ref, inbox.Followup(0, m.Message))
	case Steer:
		a.forward(ctx, m.Ref, inbox.Steer(0, m.Message))
	case Inject:
		a.forward(ctx, m.Ref, inbox.Inject(0, m.Message))
	case Dispose:
		a.disposes = append(a.disposes, caller{pid: ctx.Sender(), ref: m.Ref})
		if !a.booted {
			a.buffered = append(a.buffered, m)
			return
		}
		a.handle(ctx, m)
	case inbox.SendReply:
		if r, ok := a.pushes[m.Ref]; ok {
			delete(a.pushes, m.Ref)
			a.handle(ctx, contextPushed{ref: r})
			break
		}
		if a.stepOpAnswered(ctx, m.Ref, nil) {
			break
		}
		if c, ok := a.sends[m.Ref]; ok {
			delete(a.sends, m.Ref)
			if c.pid != nil {
				ctx.Send(c.pid, Sent{Ref: c.ref, ID: m.ID})
			}
		}
	case inbox.SendFailed:
		if r, ok := a.pushes[m.Ref]; ok {
			delete(a.pushes, m.Ref)
			a.handle(ctx, contextPushed{ref: r})
			break
		}
		if a.stepOpAnswered(ctx, m.Ref, m.Err) {
			break
		}
		if c, ok := a.sends[m.Ref]; ok {
			delete(a.sends, m.Ref)
			if c.pid != nil {
				ctx.Send(c.pid, SendFailed{Ref: c.ref, Err: m.Err})
			}
		}
	case inbox.RemoveReply:
		a.stepOpAnswered(ctx, m.Ref, nil)
	case inbox.RemoveFailed:
		a.stepOpAnswered(ctx, m.Ref, m.Err)
	case inbox.ClearReply, inbox.ClearFailed:
		// A failed clear leaves the inbox as it was; nothing to undo.
	case WaitIdle:
		a.waiters = append(a.waiters, caller{pid: ctx.Sender(), ref: m.Ref})
	case RunMaintenance:
		if !a.booted {
			a.buffered = append(a.buffered, maintReq{RunMaintenance: m, from: ctx.Sender()})
			return
		}
		a.handle(ctx, maintReq{RunMaintenance: m, from: ctx.Sender()})
	case Compact:
		if a.compacts == nil {
			a.compacts = map[uint64]caller{}
		}
		ref := a.nextRef()
		a.compacts[ref] = caller{pid: ctx.Sender(), ref: m.Ref}
		if !a.booted {
			a.buffered = append(a.buffered, compactReq{ref: ref})
			return
		}
		a.handle(ctx, compactReq{ref: ref})
	default:
		a.input(ctx, m)
	}
	a.answerWaiters(ctx)
}

// input handles m, or keeps it for the boot.
func (a *agentActor) input(ctx actor.Context, m any) {
	if !a.booted {
		a.buffered = append(a.buffered, m)
		return
	}
	a.handle(ctx, m)
}

// stale reports a message meant for an earlier incarnation (see
// refShift): a reply to one of its refs, or a tick of its timer or
// maintenance task.
func (a *agentActor) stale(msg any) bool {
	var ref uint64
	switch m := msg.(type) {
	case session.AppendReply:
		ref = m.Ref
	case session.AppendFailed:
		ref = m.Ref
	case inbox.Claimed:
		ref = m.Ref
	case inbox.ClaimFailed:
		ref = m.Ref
	case llm.ChunkReceived:
		ref = m.Ref
	case llm.StreamEnded:
		ref = m.Ref
	case toolDone:
		ref = m.ref
	case toolEmitted:
		ref = m.ref
	case preStepDone:
		ref = m.ref
	case turnStoppingDone:
		ref = m.ref
	case stepEndDone:
		ref = m.ref
	case retryTick:
		return m.epoch != a.epoch
	case maintDone:
		return m.epoch != a.epoch
	default:
		return false
	}
	return ref>>refShift != a.epoch
}

// committed takes events the subscription delivered: into the driver's
// mirror, or, before the driver exists, into the log being replayed.
func (a *agentActor) committed(ctx actor.Context, events session.Events) {
	if a.d == nil {
		a.mirror(events.Slice())
		a.build(ctx) // may boot: the waiters are answered by Receive
	} else if err := a.d.CommittedEvents(events); err != nil {
		panic(err)
	}
}

// mirror adds evs to the log being replayed before the driver exists. A
// restarted incarnation may first receive events its predecessor's
// subscription fanned out before the new one replays from the start:
// an event that does not follow the last one restarts the mirror at its
// seq.
func (a *agentActor) mirror(evs []session.Event) {
	for _, ev := range evs {
		if n := len(a.past); n > 0 && ev.Seq() <= a.past[n-1].Seq() {
			i := 0
			for i < n && a.past[i].Seq() < ev.Seq() {
				i++
			}
			a.past = a.past[:i]
		}
		a.past = append(a.past, ev)
	}
}

// repair closes the turn the log leaves open (docs/architecture.md#actors):
// the previous incarnation crashed inside it. The closers (synthetic results
// for its pending tool calls, step/end, turn/end{interrupted}) are appended
// through the session actor; the driver is built once the subscription has
// delivered them, so it starts on a balanced log. Nothing else appends
// meanwhile that could conflict: the agent is the only writer of turn events,
// and inbox splices are valid anywhere.
func (a *agentActor) repair(ctx actor.Context) {
	closers := session.InterruptedTurnClosers(a.past)
	if len(closers) == 0 {
		return
	}
	drafts := make([]session.Draft, len(closers))
	for i, ev := range closers {
		d := session.NewDraft(ev.Type(), ev.Data())
		if srcs, ok := ev.SourceEventSeqs(); ok {
			d = d.WithSources(srcs)
		}
		drafts[i] = d
	}
	a.repairing = true
	a.repairRef = a.nextRef()
	ctx.Request(a.session, session.NewAppend(a.repairRef, drafts...))
}

// build makes the driver once the log is replayed and balanced.
func (a *agentActor) build(ctx actor.Context) {
	if a.d != nil || !a.subscribed {
		return
	}
	if a.repairing {
		if len(session.InterruptedTurnClosers(a.past)) > 0 {
			return
		}
		a.repairing = false
	}
	d, err := newDriver(a.driver, a.header, a.past)
	if err != nil {
		panic(err)
	}
	// The driver's refs are apart from the shell's (the crash-repair
	// append's reply may arrive after the driver's first appends).
	d.refs = a.epoch<<refShift | 1<<(refShift-1)
	a.d, a.past = d, nil
	a.boot(ctx)
}

// restarting runs on the crashed incarnation, before the next one is
// made (protoactor then stops the children, the inbox and any stream
// actor, and waits for them). It stops what this incarnation owns
// outside the actor (timer, goroutines' context), hands its waiting
// callers over: WaitIdle and Dispose requests are re-queued to self with
// their senders, forwarded sends are carried (see carried); and it
// answers what cannot survive (Compact, maintenance) with errRestarted.
func (a *agentActor) restarting(ctx actor.Context) {
	a.stop()
	if a.timer != nil {
		a.timer.Stop()
	}
	for _, w := range a.waiters {
		ctx.RequestWithCustomSender(ctx.Self(), WaitIdle{Ref: w.ref}, w.pid)
	}
	for _, w := range a.disposes {
		ctx.RequestWithCustomSender(ctx.Self(), Dispose{Ref: w.ref}, w.pid)
	}
	a.waiters, a.disposes = nil, nil
	for _, c := range a.compacts {
		if c.pid != nil {
			ctx.Send(c.pid, Compacted{Ref: c.ref, Outcome: CompactFailed, Error: errRestarted.Error()})
		}
	}
	if c := a.maint; c != nil && c.pid != nil {
		ctx.Send(c.pid, MaintenanceDone{Ref: c.ref, Err: errRestarted})
	}
	if len(a.sends) > 0 {
		a.lin.put(ctx.Self().String(), carried{sends: a.sends})
	}
}

// stop cancels the abort signal for good: the goroutines the agent
// started are told to return, and any it starts from now on are born
// cancelled.
func (a *agentActor) stop() {
	a.stopped = true
	if a.signalCancel != nil {
		a.signalCancel()
	}
}

// abortSignal returns the running turn's abort signal, for a goroutine
// the agent starts under it. It is made on first use, so an agent that
// starts none (an idle session) holds no context: each cancellable one
// costs a few hundred bytes.
func (a *agentActor) abortSignal() context.Context {
	if a.signal == nil {
		a.signal, a.signalCancel = context.WithCancel(context.Background())
		if a.stopped {
			a.signalCancel()
		}
	}
	return a.signal
}

func (a *agentActor) start(ctx actor.Context) {
	a.self, a.root = ctx.Self(), ctx.ActorSystem().Root
	a.epoch = a.lin.nextEpoch()
	a.refs = a.epoch << refShift
	// The maps of requests in flight are made on first use: an idle
	// session's agent holds none.
	a.sends = a.lin.take(ctx.Self().String()).sends
	props, err := inbox.Props(inbox.ActorConfig{Session: a.session, Owner: ctx.Self(), Inbox: a.cfg.Inbox})
	if err != nil {
		panic(err)
	}
	a.inbox = ctx.Spawn(props)
	a.headerRef, a.pendingRef = a.nextRef(), a.nextRef()
	// The header arrives before the subscription's first events (same
	// sender, sent in this order), and the subscription replays the
	// whole log before Subscribed.
	ctx.Request(a.session, session.QueryHeader{Ref: a.headerRef})
	ctx.Request(a.session, session.Subscribe{Subscriber: ctx.Self(), From: 0})
	ctx.Request(a.inbox, inbox.QueryPending{Ref: a.pendingRef})
}

// boot completes once the mirror is built and the inbox counts are known,
// then replays the inputs that waited.
func (a *agentActor) boot(ctx actor.Context) {
	if a.booted || a.d == nil || !a.pendingSeen {
		return
	}
	a.booted = true
	a.d.InboxPending(a.pendingTurn, a.pendingStep)
	buf := a.buffered
	a.buffered = nil
	for _, m := range buf {
		a.handle(ctx, m)
	}
}

// forward sends s to the inbox on behalf of the caller. Before boot the
// driver's abort state is unknown, but then no turn is running either.
func (a *agentActor) forward(ctx actor.Context, callerRef uint64, s inbox.Send) {
	a.sendHeld(ctx) // the inbox appends too: what the agent received first goes first
	if a.d != nil && a.d.Disposed() {
		if p := ctx.Sender(); p != nil {
			ctx.Send(p, SendFailed{Ref: callerRef, Err: ErrDisposed})
		}
		return
	}
	if a.d != nil {
		s.Target = a.d.SendTarget(s.Target, s.Wake)
	}
	s.Ref = a.nextRef()
	if a.sends == nil {
		a.sends = map[uint64]caller{}
	}
	a.sends[s.Ref] = caller{pid: ctx.Sender(), ref: callerRef}
	ctx.Request(a.inbox, s)
}

// handle feeds one input to the core and performs its effects. A core
// error means the agent's view of the log is wrong: panic, and let the
// restart rebuild it from the log.
func (a *agentActor) handle(ctx actor.Context, msg any) {
	d := a.d
	var eff Effects
	var err error
	switch m := msg.(type) {
	case inbox.Woken:
		eff = d.Wake(m.Target)
	case inbox.Inserted:
		d.InboxChanged(m.Target, 1)
	case inbox.Discarded:
		d.InboxChanged(m.Target, -1)
	case inbox.ClaimedNotice:
		d.InboxChanged(m.Target, -1)
	case inbox.Claimed:
		eff = d.Claimed(m.Ref, m.Messages())
	case inbox.ClaimFailed:
		err = errors.Join(errors.New("agent: claim refused"), m.Err)
	case session.AppendReply:
		eff, err = d.Appended(m.Ref, m.Events)
	case session.AppendFailed:
		err = d.AppendFailed(m.Ref, m.Err)
	case llm.ChunkReceived:
		eff = d.StreamChunk(m.Ref, m.Chunk)
	case llm.StreamEnded:
		eff = d.StreamEnded(m.Ref, m.Finish, m.Cancelled)
		defer a.releaseChunkBuffers() // after the effects: what they hold is sent
	case toolDone:
		eff = d.ToolDone(m.ref, m.result)
	case toolEmitted:
		eff = d.ToolEmitted(m.ref, m.draft)
	case preStepDone:
		eff = d.PreStepDone(m.ref, m.dec, m.err)
	case turnStoppingDone:
		eff = d.TurnStoppingDone(m.ref, m.err)
	case stepEndDone:
		eff = d.StepEndDone(m.ref, m.dec, m.err)
	case stepOpDone:
		eff = d.StepEndOpDone(m.ref)
	case retryTick:
		eff = d.RetryTimerFired(m.gen)
	case contextPushed:
		eff = d.ContextPushed(m.ref)
	case Cancel:
		eff = d.Cancel(m.Cause, m.KeepInbox)
	case SetSystem:
		eff = d.SetSystem(m.Prompt)
	case SetRuntimeContext:
		eff = d.SetRuntimeContext(m.Context)
	case Dispose:
		eff = d.Dispose()
	case compactReq:
		eff = d.Compact(m.ref)
	case maintReq:
		a.startMaintenance(ctx, m)
		return
	case maintDone:
		if m.stack != nil {
			if l := ctx.Logger(); l != nil {
				l.Error("agent: maintenance task panicked", "err", m.err, "stack", string(m.stack))
			}
		}
		eff = d.MaintenanceDone()
		c := a.maint
		a.maint = nil
		a.perform(ctx, eff)
		if c != nil && c.pid != nil {
			ctx.Send(c.pid, MaintenanceDone{Ref: c.ref, Err: m.err})
		}
		return
	}
	if err != nil {
		panic(err)
	}
	a.perform(ctx, eff)
}

func (a *agentActor) perform(ctx actor.Context, eff Effects) {
	for _, e := range eff {
		if ae, ok := e.(AppendEffect); ok && isChunkAppend(ae) {
			a.appendChunk(ctx, ae)
			continue
		}
		a.sendHeld(ctx) // everything else goes after the chunks before it
		switch e := e.(type) {
		case AppendEffect:
			ctx.Request(a.session, session.NewAppend(e.Ref, e.Drafts...).Delivering())
		case ClaimEffect:
			ctx.Request(a.inbox, inbox.Claim{Ref: e.Ref, Target: e.Target, Turn: e.Turn})
		case ClearInboxEffect:
			ctx.Request(a.inbox, inbox.Clear{Ref: a.nextRef()})
		case PushContextEffect:
			ref := a.nextRef()
			if a.pushes == nil {
				a.pushes = map[uint64]uint64{}
			}
			a.pushes[ref] = e.Ref
			ctx.Request(a.inbox, inbox.Send{Ref: ref, Message: e.Message, Target: inbox.NextStep, Origin: inbox.Loop})
		case StartStreamEffect:
			props, err := llm.StreamProps(llm.StreamConfig{Provider: a.cfg.Provider, Request: e.Request, Ref: e.Ref,
				Timeout: a.cfg.StreamTimeout})
			if err != nil {
				panic(err)
			}
			a.stream = ctx.Spawn(props)
		case CancelStreamEffect:
			if a.stream != nil {
				ctx.Send(a.stream, llm.CancelStream{Ref: e.Ref})
			}
		case RunToolEffect:
			a.runTool(e)
		case RunPreStepEffect:
			a.runPreStep(e)
		case RunTurnStoppingEffect:
			a.runTurnStopping(e)
		case RunStepEndEffect:
			a.runStepEnd(e)
		case InboxOpEffect:
			ref := a.nextRef()
			if a.stepOps == nil {
				a.stepOps = map[uint64]uint64{}
			}
			a.stepOps[ref] = e.Ref
			if s, ok := e.Op.send(); ok {
				s.Ref = ref
				ctx.Request(a.inbox, s)
			} else {
				ctx.Request(a.inbox, inbox.Remove{Ref: ref, ID: e.Op.id})
			}
		case StartTimerEffect:
			root, self, epoch, gen := a.root, a.self, a.epoch, e.Gen
			if a.timer != nil {
				a.timer.Stop()
			}
			a.timer = time.AfterFunc(e.Delay, func() { root.Send(self, retryTick{epoch: epoch, gen: gen}) })
		case NewSignalEffect:
			if a.signalCancel != nil {
				a.signalCancel()
			}
			a.signal, a.signalCancel = nil, nil // made again when needed
		case AbortEffect:
			a.abortSignal()
			a.signalCancel()
			if a.timer != nil {
				a.timer.Stop()
			}
		case StatusEffect:
			if a.cfg.Observer != nil {
				ctx.Send(a.cfg.Observer, StatusChanged(e))
			}
		case TurnErrorEffect:
			if a.cfg.Observer != nil {
				ctx.Send(a.cfg.Observer, TurnFailed(e))
			}
		case CompactDoneEffect:
			c, ok := a.compacts[e.Ref]
			delete(a.compacts, e.Ref)
			if ok && c.pid != nil {
				ctx.Send(c.pid, Compacted{Ref: c.ref, Outcome: e.Outcome, CompactionID: e.CompactionID, Error: e.Err})
			}
		}
	}
}

// isChunkAppend reports whether e appends a single assistant/chunk.
func isChunkAppend(e AppendEffect) bool {
	return len(e.Drafts) == 1 && e.Drafts[0].Type() == session.TypeAssistantChunk
}

// appendChunk sends the chunk append e, or holds it behind the chunk
// Append in flight (see chunkAppends).
func (a *agentActor) appendChunk(ctx actor.Context, e AppendEffect) {
	c := &a.chunks
	if len(c.flight) > 0 {
		c.heldRefs = append(c.heldRefs, e.Ref)
		c.heldDrafts = append(c.heldDrafts, e.Drafts[0])
		return
	}
	ctx.Request(a.session, session.NewAppend(e.Ref, e.Drafts...).Delivering())
	c.flight = append(c.flight, chunkFlight{ref: e.Ref})
}

// sendHeld sends the held chunks as one Append, under the first one's
// ref (the driver's refs are unique and carry the epoch, as the shell's
// own do).
func (a *agentActor) sendHeld(ctx actor.Context) {
	c := &a.chunks
	if len(c.heldRefs) == 0 {
		return
	}
	refs := c.heldRefs
	ctx.Request(a.session, session.NewAppend(refs[0], c.heldDrafts...).Delivering()) // NewAppend copies
	c.flight = append(c.flight, chunkFlight{ref: refs[0], refs: refs})
	c.heldRefs = nil
	clear(c.heldDrafts)
	c.heldDrafts = c.heldDrafts[:0]
}

// chunkReply takes the answer m to the oldest chunk Append in flight,
// if it is one: the driver gets one acknowledgement per chunk, in order,
// and then what was held meanwhile is sent. The session answers Appends
// in the order it got them, so any other answer is not a chunk
// Append's.
func (a *agentActor) chunkReply(ctx actor.Context, m session.AppendReply) bool {
	c := &a.chunks
	if len(c.flight) == 0 || c.flight[0].ref != m.Ref {
		return false
	}
	f := c.flight[0]
	n := copy(c.flight, c.flight[1:]) // a few at most: one Append, one batch behind it
	c.flight[n] = chunkFlight{}
	c.flight = c.flight[:n]
	if f.refs == nil {
		if !a.booted { // cannot be: only a booted driver appends
			a.input(ctx, m)
		} else {
			// What handle does for an AppendReply, without boxing it.
			eff, err := a.d.Appended(m.Ref, m.Events)
			if err != nil {
				panic(err)
			}
			a.perform(ctx, eff)
		}
	} else {
		if m.Events.Len() != len(f.refs) {
			panic(fmt.Errorf("agent: chunk append %d committed %d events, want %d", m.Ref, m.Events.Len(), len(f.refs)))
		}
		for i, r := range f.refs {
			if !a.booted { // cannot be: only a booted driver appends
				a.input(ctx, session.AppendReply{Ref: r, Events: m.Events.View(i, i+1)})
				continue
			}
			// What handle does for an AppendReply, without boxing one
			// per chunk.
			eff, err := a.d.Appended(r, m.Events.View(i, i+1))
			if err != nil {
				panic(err)
			}
			a.perform(ctx, eff)
		}
	}
	a.sendHeld(ctx)
	a.releaseChunkBuffers()
	return true
}

// releaseChunkBuffers drops the chunk buffers once the stream is over and
// nothing is in flight, so an idle session keeps none. While the stream
// runs they are kept: at a model's pace each chunk's Append is answered
// before the next chunk, and reallocating them cost allocations per
// chunk.
func (a *agentActor) releaseChunkBuffers() {
	c := &a.chunks
	if len(c.flight) > 0 || (a.d != nil && a.d.Streaming()) {
		return
	}
	c.flight, c.heldDrafts, c.heldRefs = nil, nil, nil
}

func (a *agentActor) answerWaiters(ctx actor.Context) {
	if !a.booted || !a.d.Idle() {
		return
	}
	for _, w := range a.waiters {
		if w.pid != nil {
			ctx.Send(w.pid, Idle{Ref: w.ref})
		}
	}
	a.waiters = nil
	if a.d.Disposed() {
		for _, w := range a.disposes {
			if w.pid != nil {
				ctx.Send(w.pid, Disposed{Ref: w.ref})
			}
		}
		a.disposes = nil
	}
}

// runTool runs a tool body in a goroutine owned by the actor, under the
// turn's abort signal. Emits and the result come back as messages, in
// that order (one goroutine sends both).
func (a *agentActor) runTool(e RunToolEffect) {
	root, self, sig, ref := a.root, a.self, a.abortSignal(), e.Ref
	t, _ := a.cfg.Tools.Lookup(e.Call.Name)
	call := e.Call
	var mu sync.Mutex // guards open
	open := true
	call.emit = func(dr session.Draft) {
		mu.Lock()
		defer mu.Unlock()
		if open {
			root.Send(self, toolEmitted{ref: ref, draft: dr})
		}
	}
	hooks := a.cfg.Hooks
	a.wg.Go(func() {
		r := executeCall(sig, t, call, hooks)
		mu.Lock()
		open = false
		mu.Unlock()
		root.Send(self, toolDone{ref: ref, result: r})
	})
}

func (a *agentActor) runPreStep(e RunPreStepEffect) {
	root, self, sig, h := a.root, a.self, a.abortSignal(), a.cfg.Hooks.PreStep
	a.wg.Go(func() {
		dec, err := func() (dec PreStepDecision, err error) {
			defer recoverHook("pre-step", &err)
			return h.PreStep(sig, PreStepInput{Turn: e.Turn, Step: e.Step, Messages: e.Messages, Snapshot: e.Snapshot})
		}()
		root.Send(self, preStepDone{ref: e.Ref, dec: dec, err: err})
	})
}

func (a *agentActor) runTurnStopping(e RunTurnStoppingEffect) {
	root, self, sig, h := a.root, a.self, a.abortSignal(), a.cfg.Hooks.TurnStopping
	steer := func(m messages.Message) { root.Send(self, Steer{Message: m}) }
	a.wg.Go(func() {
		err := func() (err error) {
			defer recoverHook("turn-stopping", &err)
			return h.TurnStopping(sig, TurnStoppingInput{Turn: e.Turn, Steer: steer})
		}()
		root.Send(self, turnStoppingDone{ref: e.Ref, err: err})
	})
}

func (a *agentActor) runStepEnd(e RunStepEndEffect) {
	root, self, sig, h := a.root, a.self, a.abortSignal(), a.cfg.Hooks.StepEnd
	a.wg.Go(func() {
		dec, err := func() (dec StepEndDecision, err error) {
			defer recoverHook("step-end", &err)
			return h.StepEnd(sig, StepEndInput{Turn: e.Turn, Step: e.Step})
		}()
		root.Send(self, stepEndDone{ref: e.Ref, dec: dec, err: err})
	})
}

// stepOpAnswered hands the inbox's answer to a step-end operation to the
// driver, and reports whether ref was one. A refused operation changed
// nothing; it is dropped (the hook has returned: there is nobody to tell)
// and logged, and the loop goes on.
func (a *agentActor) stepOpAnswered(ctx actor.Context, ref uint64, err error) bool {
	r, ok := a.stepOps[ref]
	if !ok {
		return false
	}
	delete(a.stepOps, ref)
	if err != nil {
		if l := ctx.Logger(); l != nil {
			l.Warn("agent: a step-end hook's inbox operation was refused", "err", err)
		}
	}
	a.handle(ctx, stepOpDone{ref: r})
	return true
}

// maintReq is a RunMaintenance with its sender (kept when buffered).
type maintReq struct {
	RunMaintenance
	from *actor.PID
}

// startMaintenance runs a maintenance task under a fresh abort signal, or
// refuses it.
func (a *agentActor) startMaintenance(ctx actor.Context, m maintReq) {
	reply := func(err error) {
		if m.from != nil {
			ctx.Send(m.from, MaintenanceDone{Ref: m.Ref, Err: err})
		}
	}
	if m.Task == nil {
		reply(errors.New("agent: maintenance without a task"))
		return
	}
	eff, err := a.d.StartMaintenance()
	a.perform(ctx, eff)
	if err != nil {
		reply(err)
		return
	}
	a.maint = &caller{pid: m.from, ref: m.Ref}
	root, self, sig, task, epoch := a.root, a.self, a.abortSignal(), m.Task, a.epoch
	a.wg.Go(func() {
		stack, err := runMaintenanceTask(sig, task)
		root.Send(self, maintDone{epoch: epoch, err: err, stack: stack})
	})
}

// runMaintenanceTask runs task, turning a panic into its error (as a
// hook's panic is, see recoverHook): the goroutine is the agent's, so an
// escaped panic would take the whole process down, not just the task.
// The stack stays out of the error, which reaches the requester; the
// shell logs it.
func runMaintenanceTask(ctx context.Context, task func(context.Context) error) (stack []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			stack, err = debug.Stack(), fmt.Errorf("agent: maintenance task panicked: %v", r)
		}
	}()
	return nil, task(ctx)
}
