package agent

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/invariants"
	"github.com/dshgo/dsh/messages"
)

// Status is the agent's externally visible status
// (docs/agent-loop.md#turns-and-steps).
type Status uint8

const (
	// StatusIdle: no turn is running.
	StatusIdle Status = iota
	// StatusRunning: a turn is running (or converging after a cancel).
	StatusRunning
)

func (s Status) String() string {
	if s == StatusRunning {
		return "running"
	}
	return "idle"
}

// The pure core: Driver is the turn/step state machine of
// docs/agent-loop.md#turns-and-steps.
// It has no goroutines, no clock and no I/O: each input method returns the
// Effects the shell must perform, in order. Appends are pipelined: the
// core issues Append effects and learns the seqs from the acknowledgements
// (Appended), which arrive in issue order. Where it needs seqs or a
// settled log (an anchor citing its chunks, a request built from the
// log, an inbox request that must follow its own events), it waits until
// every append in flight is acknowledged ("settle").
//
// The core keeps a mirror of the session log (a session.Log restored from the
// events the session actor publishes to the agent's subscription), and builds
// every request from it: messages = mirror.DeriveMessages(), config = the
// folded header. That is the reference's behaviour (the request is the log's
// projection), and it makes the request reconstruction theorem
// (docs/session-log.md#invariants) hold by construction; invariants builds
// additionally re-derive from scratch at every dispatch. The rejected
// alternative, asking the session actor (QueryMessages) before each dispatch,
// costs a round trip per request and still races with the inbox's splices.

// Effect is one thing the shell must do. The concrete types are below.
type Effect interface{ effect() }

// Effects is the ordered list an input produced.
type Effects []Effect

// AppendEffect appends Drafts to the session log, atomically, in order.
type AppendEffect struct {
	Ref    uint64
	Drafts []session.Draft
}

// ClaimEffect claims inbox input for turn Turn.
type ClaimEffect struct {
	Ref    uint64
	Target inbox.Target
	Turn   int64
}

// ClearInboxEffect cancels everything pending in the inbox.
type ClearInboxEffect struct{}

// PushContextEffect appends Message to the inbox's next-step list with
// loop origin (a tool's additional context). The inbox's answer (the
// splice committed, or the send refused) comes back as ContextPushed(Ref):
// the core waits for it before it commits anything else of the step, so
// that the splice follows its tool/result and precedes the next result
// and step/end (docs/agent-loop.md#tool-calls).
type PushContextEffect struct {
	Ref     uint64
	Message messages.Message
}

// StartStreamEffect starts model call Ref.
type StartStreamEffect struct {
	Ref     uint64
	Request llm.Request
}

// CancelStreamEffect cancels model call Ref.
type CancelStreamEffect struct{ Ref uint64 }

// RunToolEffect runs a tool call; its result comes back as ToolDone(Ref).
type RunToolEffect struct {
	Ref  uint64
	Call Call
}

// RunPreStepEffect runs the pre-step hook; the decision comes back as
// PreStepDone(Ref). Snapshot, when not zero, is the runtime-context
// snapshot the default decision enters (see PreStepInput).
type RunPreStepEffect struct {
	Ref      uint64
	Turn     int64
	Step     int64
	Messages []messages.Message
	Snapshot messages.Message
}

// RunTurnStoppingEffect runs the turn-stopping hook; it comes back as
// TurnStoppingDone(Ref).
type RunTurnStoppingEffect struct {
	Ref  uint64
	Turn int64
}

// StartTimerEffect arms the retry backoff timer; it fires as
// RetryTimerFired(Gen).
type StartTimerEffect struct {
	Gen   uint64
	Delay time.Duration
}

// NewSignalEffect: a turn starts; the shell makes a fresh abort signal
// (the context its hooks and tools run under).
type NewSignalEffect struct{}

// AbortEffect: the turn was cancelled with Cause; the shell cancels the
// signal (in-flight hooks and tool bodies).
type AbortEffect struct{ Cause session.CancelCause }

// StatusEffect reports a status change.
type StatusEffect struct{ Status Status }

// TurnErrorEffect reports a turn that ended in error (agent/error).
type TurnErrorEffect struct {
	Turn, Step int64
	Error      messages.LlmFailure
}

func (AppendEffect) effect()          {}
func (ClaimEffect) effect()           {}
func (ClearInboxEffect) effect()      {}
func (PushContextEffect) effect()     {}
func (StartStreamEffect) effect()     {}
func (CancelStreamEffect) effect()    {}
func (RunToolEffect) effect()         {}
func (RunPreStepEffect) effect()      {}
func (RunTurnStoppingEffect) effect() {}
func (StartTimerEffect) effect()      {}
func (NewSignalEffect) effect()       {}
func (AbortEffect) effect()           {}
func (StatusEffect) effect()          {}
func (TurnErrorEffect) effect()       {}

// PreStepDecision is the pre-step hook's answer: Reject closes the turn
// blocked; otherwise Messages enter the step (the claimed batch, possibly
// rewritten; keep the ids), followed by Entries.
//
// Entries and Preface let a hook contribute what the reference's plugins
// write during a pre-step (docs/replay.md: the log replay re-inserts recorded
// plugin contributions): Entries are recorded inside the step, after
// step/start and the Messages, in order (a plugin-sourced message such as
// the runtime-context snapshot, or a log-only plugin event such as
// session/title); Preface events are recorded at once, before step/start
// (or before turn/end when the decision rejects or enters nothing), as a
// pre-step listener's own appends would be. Their log-only events must be
// of a foreign or unknown type (dsh writes its own core events; an
// unknown type is recorded ignorable); anything else ends the turn in
// error. The slices belong to the agent once returned.
type PreStepDecision struct {
	Reject   bool
	Messages []messages.Message
	Entries  []Entry
	Preface  []session.Draft
}

// Entry is one item of a step's enter batch: a message, recorded as a
// user/message (surface append, verbatim, id kept), or, when Message is
// zero, a log-only event, recorded as is. Build it with MessageEntry or
// EventEntry.
type Entry struct {
	Message messages.Message
	Event   session.Draft
}

// MessageEntry returns the entry of message m.
func MessageEntry(m messages.Message) Entry { return Entry{Message: m} }

// EventEntry returns the entry of the log-only event d.
func EventEntry(d session.Draft) Entry { return Entry{Event: d} }

// logOnlyDraft vets a hook's log-only event: it rebuilds the draft from
// its type and data (so that no surface operation rides along), and
// refuses core types, which dsh writes itself and whose data the session
// would check (a refused append would crash the agent).
func logOnlyDraft(hook string, d session.Draft) (session.Draft, error) {
	t := d.Type()
	switch {
	case t == "":
		return session.Draft{}, fmt.Errorf("agent: %s event without a type", hook)
	case t.IsCore():
		return session.Draft{}, fmt.Errorf("agent: %s event of core type %q", hook, t)
	case t.IsForeign():
		return session.NewDraft(t, d.Data()), nil
	}
	return session.NewDraft(t, d.Data()).AsIgnorable(), nil
}

// enterBatch is a decision's recorded form: the drafts after step/start
// and how many of them are messages.
func enterBatch(dec PreStepDecision) (preface, batch []session.Draft, nmsgs int, err error) {
	for _, d := range dec.Preface {
		v, err := logOnlyDraft("pre-step", d)
		if err != nil {
			return nil, nil, 0, err
		}
		preface = append(preface, v)
	}
	for _, m := range dec.Messages {
		if m.IsZero() || m.Role() != messages.RoleUser {
			return nil, nil, 0, errors.New("agent: pre-step entered a message that is not a user message")
		}
		batch = append(batch, session.UserMessage{Message: m}.Draft())
		nmsgs++
	}
	for _, e := range dec.Entries {
		if !e.Message.IsZero() {
			if e.Message.Role() != messages.RoleUser {
				return nil, nil, 0, errors.New("agent: pre-step entered a message that is not a user message")
			}
			batch = append(batch, session.UserMessage{Message: e.Message}.Draft())
			nmsgs++
			continue
		}
		v, err := logOnlyDraft("pre-step", e.Event)
		if err != nil {
			return nil, nil, 0, err
		}
		batch = append(batch, v)
	}
	return preface, batch, nmsgs, nil
}

// RequestInput is what the request hook sees.
type RequestInput struct {
	Turn, Step int64
	Seed       messages.CallConfig
}

// RequestErrorInput is what the request-error hook sees.
type RequestErrorInput struct {
	Turn, Step int64
	Provider   string
	Failure    messages.LlmFailure
	Attempt    int // 1 for the first call of the step
}

// RequestErrorDecision is the request-error hook's answer.
type RequestErrorDecision uint8

const (
	// DecideDefault applies the retry policy.
	DecideDefault RequestErrorDecision = iota
	// DecideRetry retries now (after the policy's backoff for this retry
	// number, or InitialDelay when the policy would not retry).
	DecideRetry
	// DecideFail ends the turn with the failure.
	DecideFail
	// DecideRetryHeld retries after a backoff that lasts until the turn is
	// cancelled (HeldRetryDelay): llm/retry is written, llm/retry-started
	// is not. Log replay uses it to reproduce a recording cancelled during
	// a retry's backoff (docs/replay.md).
	DecideRetryHeld
)

// HeldRetryDelay is the backoff of DecideRetryHeld: longer than any run
// that means to cancel it.
const HeldRetryDelay = 24 * time.Hour

// DriverConfig configures a Driver. Provider and Model are required.
type DriverConfig struct {
	// Provider and Model seed the first request's config
	// (docs/agent-loop.md#building-a-request).
	Provider, Model string
	// MaxTokens, when present, is added to the first request's seed.
	MaxTokens messages.OptInt
	// System is the system prompt ("" for none).
	System string
	// Tools are the schemas offered to the model, in the order given
	// (canonical: lexicographic, as Registry.Schemas returns them).
	Tools []messages.ToolSchema
	// Modes classifies a tool call (default: every call Exclusive). It
	// runs inside the core and must not block; a panic is recovered and
	// is the call's error result (TOOL_PANIC).
	Modes func(name string, input messages.JSON) Mode
	// MaxParallelTools bounds the parallel pool. Default 10.
	MaxParallelTools int
	// Retry is the retry policy of failed calls (zero: the defaults).
	Retry llm.RetryPolicy
	// NoRetry disables retries unless the request-error hook asks.
	NoRetry bool
	// PreStep, TurnStopping and StepEnd say whether those hooks exist:
	// when they do, the core asks the shell to run them (RunPreStepEffect,
	// RunTurnStoppingEffect, RunStepEndEffect) and waits for the answer.
	PreStep, TurnStopping, StepEnd bool
	// Request is the request hook (agent/request): it may replace the
	// seed config. It runs inside the core, so it must not block.
	Request func(RequestInput) (messages.CallConfig, error)
	// RequestError is the request-error hook (agent/request-error). It
	// runs inside the core and must not block. Default: DecideDefault.
	RequestError func(RequestErrorInput) (RequestErrorDecision, error)
	// Routes describes the route of a request's provider and model (nil:
	// the zero Route for every route). It runs inside the core and must
	// not block; a panic is recovered and ends the turn in error.
	Routes func(provider, model string) Route
	// Compaction configures compaction (docs/agent-loop.md#compaction; see
	// CompactionConfig).
	Compaction CompactionConfig
	// RuntimeContext is the runtime context snapshotted into the steps
	// (docs/agent-loop.md#runtime-context; see Config.RuntimeContext). Empty:
	// off until SetRuntimeContext.
	RuntimeContext RuntimeContext
}

// Route is what the agent knows of a provider/model route (the reference's
// adapter and model catalog): the call-config fields its adapter
// materialises when a request leaves them out, which the request header
// marks as adapter defaults (docs/session-log.md#request-headers), and the
// model's context window, logged in request/context
// (docs/agent-loop.md#building-a-request). The zero Route
// materialises nothing and has no known window.
type Route struct {
	// ReasoningEffort fills an absent effort ("" for none).
	ReasoningEffort string
	// MaxTokens fills an absent maxTokens.
	MaxTokens messages.OptInt
	// ContextWindow is the model's context window, when known.
	ContextWindow messages.OptInt
}

// DefaultMaxParallelTools is the reference's DEFAULT_MAX_PARALLEL_TOOL_CALLS.
const DefaultMaxParallelTools = 10

// Validate reports a missing provider or model, or a negative pool.
func (c DriverConfig) Validate() error {
	switch {
	case c.Provider == "" || c.Model == "":
		return errors.New("agent: config needs a provider and a model")
	case c.MaxParallelTools < 0:
		return errors.New("agent: MaxParallelTools is negative")
	}
	return c.Retry.Validate()
}

type phase uint8

const (
	phIdle         phase = iota
	phSettle             // waiting for appends before a continuation
	phClaim              // waiting for Claimed
	phPreStep            // waiting for the pre-step hook
	phStream             // waiting for the stream to end
	phRetryWait          // waiting for the backoff timer
	phTools              // tool calls in flight or uncommitted
	phTurnStopping       // waiting for the turn-stopping hook
	phCompact            // waiting for a compaction's summariser call
	phStepEnd            // waiting for the step-end hook or one of its inbox operations
)

// stepOutcome is how a step ended (docs/agent-loop.md#turns-and-steps).
type stepOutcome uint8

const (
	outMore stepOutcome = iota // tool work done, a follow-up request is owed
	outCompleted
	outMaxTokens
	outAborted
	outError
)

// appendTag says what the core needs from an append's acknowledgement.
type appendTag struct {
	chunk    bool // an assistant/chunk of the current attempt
	toolCall int  // index+1 of a tool call whose seq is needed; 0 for none
	// compaction is compStart or compSummary: a bracket event whose seq
	// the checkpoint cites.
	compaction uint8
}

type toolCall struct {
	block     messages.ContentBlock
	input     messages.JSON
	ref       uint64
	started   bool
	done      bool
	committed bool
	seq       int64 // the tool/call seq; -1 until acknowledged
	result    Result
}

// turnState is one turn's state; reset by startTurn.
type turnState struct {
	turn, step  int64
	ends        *session.TurnEndReason // nil: more work owed
	maxTokens   bool                   // sticky for the rest of the turn
	stoppingRan bool                   // the turn-stopping hook ran at this boundary
	stepEndRan  bool                   // the step-end hook ran at this boundary
	aborted     bool
	cause       session.CancelCause
	stopAfter   bool   // the driver stops after this turn (no continuation)
	ending      bool   // turn/end is issued; waiting for it to commit
	system      string // the system prompt of the step in flight

	// the step in flight
	retries   map[string]int // per provider and policy key
	attempt   int
	streamRef uint64
	asm       llm.BlockAssembler
	chunkSeqs []int64
	// failedFinish: the attempt's stream delivered an error or aborted
	// finish before any abort.
	failedFinish bool
	// tooLarge: the attempt's stream delivered a chunk whose record the
	// log would refuse (not recorded); the step ends in error.
	tooLarge   error
	cfg        messages.CallConfig
	timerGen   uint64
	calls      []toolCall
	next       int // first unscheduled call
	commitIdx  int
	running    int
	exclusive  bool // an exclusive call is in flight
	concludes  bool
	pushes     map[uint64]bool // context pushes not answered yet
	firstClaim bool
	overflows  int // context-overflow compactions of the step

	// The step-end hook (stepend.go): the boundary's claimed batch, held
	// while its contributions are performed; the ones left; the inbox
	// operation in flight (0 for none).
	held  []messages.Message
	ops   []StepEndOp
	opRef uint64

	// snapshot is the runtime-context snapshot offered to the pre-step
	// hook in flight (zero for none).
	snapshot messages.Message
}

// Driver is the agent's pure core. Not safe for concurrent use: it
// belongs to the agent actor.
type Driver struct {
	cfg    *DriverConfig // shared by the drivers of one Template: read only
	mirror *session.Log
	out    Effects

	refs     uint64
	inflight int                  // appends not acknowledged yet
	tags     map[uint64]appendTag // by append ref (chunks: chunkRefs)
	// chunkRefs are the refs of the chunk appends in flight, in the order
	// made: they are acknowledged in that order, so the oldest is found
	// first, without the map insert and delete per chunk that tags cost.
	// chunkRefs[:chunkHead] are acknowledged already. The array is kept
	// while a stream runs (at a model's pace each chunk is acknowledged
	// before the next: reallocating it cost an allocation per chunk) and
	// dropped once the queue empties after it.
	chunkRefs []uint64
	chunkHead int
	settled   func() // run when inflight drops to 0

	phase    phase
	status   Status
	lastTurn int64
	t        *turnState

	firstRequest bool // no request made yet by this instance

	// Inbox bookkeeping, from the inbox's notifications.
	pendingTurn, pendingStep int
	stepWoke                 bool // a waking next-step send since the last claim
	wakeRequested            bool // latched wake (docs/agent-loop.md#delivery)
	claimRef, hookRef        uint64

	system   string // the system prompt steps start with (SetSystem)
	disposed bool   // Dispose was called: no turn starts again

	// maintenance: a maintenance task runs (docs/agent-loop.md#the-agent);
	// the status stays idle and waking input is latched.
	maintenance bool

	// Compaction (compaction.go).
	comp            *CompactionConfig // with defaults; shared, read only
	cmp             *compaction       // in flight
	lastCompaction  *compaction       // the last one that ended
	openCompactions map[string]bool   // live compaction/starts in the log (the lock)
	replaceGen      int               // surface replaces in the log

	// The runtime-context snapshot (runtimecontext.go): the context, whether
	// the feature is on, and the projection of the retained snapshot.
	rc   RuntimeContext
	rcOn bool
	snap snapshotState
}

// NewDriver returns a driver over a session whose log so far is past
// (the mirror is restored from it). The log must not have an open turn:
// crash repair closes it before an agent runs on it.
func NewDriver(cfg DriverConfig, h session.Header, past []session.Event) (*Driver, error) {
	ds, err := newDriverShared(cfg)
	if err != nil {
		return nil, err
	}
	return newDriver(ds, h, past)
}

// driverShared is a driver configuration prepared once (validated, with
// its defaults) and shared, read only, by every driver made from it.
type driverShared struct {
	cfg  DriverConfig
	comp CompactionConfig // cfg.Compaction with defaults
}

func newDriverShared(cfg DriverConfig) (*driverShared, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxParallelTools == 0 {
		cfg.MaxParallelTools = DefaultMaxParallelTools
	}
	return &driverShared{cfg: cfg, comp: cfg.Compaction.withDefaults()}, nil
}

// newDriver is NewDriver over a prepared configuration.
func newDriver(ds *driverShared, h session.Header, past []session.Event) (*Driver, error) {
	cfg := &ds.cfg
	m, err := session.Restore(h, past)
	if err != nil {
		return nil, fmt.Errorf("agent: mirror the log: %w", err)
	}
	if turn, _, open := m.OpenTurn(); open {
		return nil, fmt.Errorf("agent: the log has turn %d open; repair it first", turn)
	}
	d := &Driver{cfg: cfg, mirror: m, tags: map[uint64]appendTag{}, firstRequest: true, system: cfg.System,
		comp: &ds.comp, openCompactions: map[string]bool{},
		rc: cfg.RuntimeContext, rcOn: cfg.RuntimeContext.Len() > 0}
	for _, e := range past {
		d.observeCompaction(e)
		if p, ok := e.Payload().(session.TurnStart); ok {
			d.lastTurn = p.Turn
		}
	}
	return d, nil
}

// Status returns the current status.
func (d *Driver) Status() Status { return d.status }

// LastTurn returns the number of the last turn started.
func (d *Driver) LastTurn() int64 { return d.lastTurn }

// Idle reports whether the agent is quiescent: no turn, no append in
// flight, no latched wake.
func (d *Driver) Idle() bool {
	return d.phase == phIdle && d.inflight == 0 && !d.wakeRequested && !d.maintenance
}

// Disposed reports whether Dispose was called.
func (d *Driver) Disposed() bool { return d.disposed }

// System returns the system prompt the next step will use.
func (d *Driver) System() string { return d.system }

// SendTarget returns the list a send to list t must go to: a waking send
// that arrives after the running turn's abort fired is forced to
// next-turn (docs/agent-loop.md#delivery), so that it runs as its own turn when
// the latched wake replays, rather than riding as steering into whatever
// claims next-step first.
func (d *Driver) SendTarget(t inbox.Target, wake bool) inbox.Target {
	if wake && d.t != nil && d.t.aborted {
		return inbox.NextTurn
	}
	return t
}

func (d *Driver) ref() uint64 {
	d.refs++
	return d.refs
}

func (d *Driver) emit(e Effect) { d.out = append(d.out, e) }

func (d *Driver) flush() Effects {
	out := d.out
	d.out = nil
	return out
}

func (d *Driver) appendDrafts(tag appendTag, drafts ...session.Draft) {
	r := d.ref()
	d.inflight++
	switch {
	case tag == appendTag{chunk: true}:
		d.chunkRefs = append(d.chunkRefs, r)
	case tag != appendTag{}:
		d.tags[r] = tag
	}
	d.emit(AppendEffect{Ref: r, Drafts: drafts})
}

// settle runs fn once every append in flight is acknowledged (now, if
// none is).
func (d *Driver) settle(fn func()) {
	d.phase = phSettle
	if d.inflight == 0 {
		fn()
		return
	}
	d.settled = fn
}

func (d *Driver) setStatus(s Status) {
	if d.status != s {
		d.status = s
		d.emit(StatusEffect{Status: s})
	}
}

// ---- inputs -------------------------------------------------------------

// Committed feeds the mirror with events the session committed, in order
// and without gaps.
func (d *Driver) Committed(events []session.Event) error {
	for _, e := range events {
		if err := d.committed(e); err != nil {
			return err
		}
	}
	return nil
}

// CommittedEvents is Committed for a view, as the session's
// EventsCommitted carries it: the shell need not copy the events out of
// it first (a copy per chunk on the streaming path).
func (d *Driver) CommittedEvents(events session.Events) error {
	for i := range events.Len() {
		if err := d.committed(events.At(i)); err != nil {
			return err
		}
	}
	return nil
}

func (d *Driver) committed(e session.Event) error {
	if e.Seq() != d.mirror.Len() {
		if e.Seq() < d.mirror.Len() {
			return nil // already mirrored
		}
		return fmt.Errorf("agent: mirror at %d got event %d", d.mirror.Len(), e.Seq())
	}
	// The event is the session's committed value: mirror it as is
	// (its typed payload included) rather than re-encoding it as a
	// draft, which would decode every event a second time.
	if err := d.mirror.Mirror(e); err != nil {
		return fmt.Errorf("agent: mirror event %d: %w", e.Seq(), err)
	}
	d.observeCompaction(e)
	d.followSnapshot(e)
	return nil
}

// InboxPending sets the inbox counts (the answer to a query made at boot).
func (d *Driver) InboxPending(nextTurn, nextStep int) {
	d.pendingTurn, d.pendingStep = nextTurn, nextStep
}

// InboxChanged adjusts the count of list t by delta (an insert +1, a
// discard or claim −1).
func (d *Driver) InboxChanged(t inbox.Target, delta int) {
	if t == inbox.NextTurn {
		d.pendingTurn = max(d.pendingTurn+delta, 0)
	} else {
		d.pendingStep = max(d.pendingStep+delta, 0)
	}
}

// Wake handles a committed waking send to list t (docs/agent-loop.md#delivery).
// A wake that arrives after the turn's abort fired is latched and replays
// once the turn has closed, unless the cause is disposal; a disposed
// driver never starts a turn again.
func (d *Driver) Wake(t inbox.Target) Effects {
	switch {
	case d.disposed:
	case d.maintenance:
		d.wakeRequested = true // replays when the task finishes
	case d.phase == phIdle:
		d.startTurn()
	case d.t == nil:
		// a manual compaction runs: the turn starts after it
		d.wakeRequested = true
	case d.t.aborted:
		if d.t.cause.Kind != session.CauseDisposed {
			d.wakeRequested = true
		}
	case t == inbox.NextStep:
		d.stepWoke = true
	}
	return d.flush()
}

// Cancel aborts the running turn with cause (the first cause wins) and,
// unless keepInbox, clears the inbox and drops a latched wake
// (docs/agent-loop.md#cancellation).
func (d *Driver) Cancel(cause session.CancelCause, keepInbox bool) Effects {
	if !keepInbox {
		d.emit(ClearInboxEffect{})
		d.wakeRequested = false
	}
	if d.maintenance {
		// The task's context is the signal: abort it. Its end comes back
		// as MaintenanceDone.
		d.emit(AbortEffect{Cause: cause})
		return d.flush()
	}
	if d.t == nil && d.cmp != nil {
		d.cancelCompaction() // a manual compaction
		return d.flush()
	}
	if d.phase == phIdle || d.t == nil || d.t.aborted {
		return d.flush()
	}
	t := d.t
	t.aborted, t.cause = true, cause
	d.emit(AbortEffect{Cause: cause})
	if d.cmp != nil {
		d.cancelCompaction()
	}
	if t.ending {
		// turn/end is already issued with its own reason; the abort only
		// stops the continuation (the cleared inbox's counts lag behind)
		// and makes later wakes latch.
		return d.flush()
	}
	switch d.phase {
	case phStream:
		d.emit(CancelStreamEffect{Ref: t.streamRef})
	case phRetryWait:
		t.timerGen++
		d.finishStep(outAborted, messages.LlmFailure{})
	case phTools:
		d.commitTools()
	}
	return d.flush()
}

// SetSystem sets the system prompt. It takes effect at the next step (a
// step keeps the prompt it started with, across its retries): the next
// request logs a request/header {change} snapshot when the prompt really
// changed, and nothing when it did not (docs/session-log.md#request-headers).
func (d *Driver) SetSystem(prompt string) Effects {
	d.system = prompt
	return d.flush()
}

// Dispose aborts the running turn with cause disposed, keeping the inbox
// (what is pending stays durable for a later agent), drops a latched wake,
// and makes the driver inert: no turn starts again
// (docs/agent-loop.md#cancellation). The caller waits for Idle and then stops
// the agent.
func (d *Driver) Dispose() Effects {
	d.disposed = true
	d.wakeRequested = false
	return d.Cancel(session.CancelCause{Kind: session.CauseDisposed}, true)
}

// Appended acknowledges append ref with its committed events.
func (d *Driver) Appended(ref uint64, events session.Events) (Effects, error) {
	if d.inflight == 0 {
		return nil, fmt.Errorf("agent: unexpected append ack %d", ref)
	}
	d.inflight--
	if tag, ok := d.takeTag(ref); ok {
		if events.Len() != 1 {
			return nil, fmt.Errorf("agent: append %d committed %d events, want 1", ref, events.Len())
		}
		seq := events.At(0).Seq()
		switch {
		case tag.compaction > 0:
			d.compactionSeq(tag.compaction, seq)
		case tag.chunk && d.t != nil:
			d.t.chunkSeqs = append(d.t.chunkSeqs, seq)
		case tag.toolCall > 0 && d.t != nil && tag.toolCall <= len(d.t.calls):
			d.t.calls[tag.toolCall-1].seq = seq
			if d.phase == phTools {
				d.commitTools()
			}
		}
	}
	if d.inflight == 0 && d.settled != nil {
		fn := d.settled
		d.settled = nil
		fn()
	}
	return d.flush(), nil
}

// takeTag removes and returns the tag of append ref, if it has one.
func (d *Driver) takeTag(ref uint64) (appendTag, bool) {
	if q := d.chunkRefs[d.chunkHead:]; len(q) > 0 {
		if q[0] == ref {
			d.chunkHead++
			d.chunkRefsTaken()
			return appendTag{chunk: true}, true
		}
		if i := slices.Index(q, ref); i >= 0 {
			d.chunkRefs = slices.Delete(d.chunkRefs, d.chunkHead+i, d.chunkHead+i+1)
			d.chunkRefsTaken()
			return appendTag{chunk: true}, true
		}
	}
	tag, ok := d.tags[ref]
	if ok {
		delete(d.tags, ref)
	}
	return tag, ok
}

// chunkRefsTaken empties the chunk queue once every ref in it is
// acknowledged: its array is kept for the next chunk while the stream
// runs, and dropped otherwise (an idle driver keeps no array).
func (d *Driver) chunkRefsTaken() {
	switch {
	case d.chunkHead < len(d.chunkRefs):
	case d.phase == phStream:
		d.chunkRefs, d.chunkHead = d.chunkRefs[:0], 0
	default:
		d.chunkRefs, d.chunkHead = nil, 0
	}
}

// Streaming reports whether a model call's chunks are being received (the
// shell keeps its chunk buffers meanwhile).
func (d *Driver) Streaming() bool { return d.phase == phStream }

// AppendFailed reports a refused append: the agent's view of the log is
// wrong, which the core cannot repair. The shell crashes the actor.
func (d *Driver) AppendFailed(ref uint64, err error) error {
	return fmt.Errorf("agent: session refused append %d: %w", ref, err)
}

// Claimed delivers the inbox's answer to the claim ref.
func (d *Driver) Claimed(ref uint64, msgs []messages.Message) Effects {
	if d.phase != phClaim || ref != d.claimRef {
		return d.flush()
	}
	d.stepWoke = false
	t := d.t
	switch {
	case t.aborted:
		d.endTurn(abortedReason(t.cause))
	case d.cfg.StepEnd && t.step > 0 && !t.stepEndRan:
		d.runStepEnd(msgs)
	default:
		d.claimed(msgs)
	}
	return d.flush()
}

// claimed goes on from a claim's batch: the end of the turn, or the
// pressure check and the pre-step (docs/agent-loop.md#turns-and-steps).
func (d *Driver) claimed(msgs []messages.Message) {
	t := d.t
	switch {
	case t.ends != nil && len(msgs) == 0:
		// The step boundary found next-step empty: the reference checks
		// the list and goes to turn-stopping without a pre-step; running the hook here would let it block a turn
		// that already completed.
		d.enter(nil, nil, 0)
	default:
		// The pressure trigger runs before the pre-step hook
		// (docs/agent-loop.md#extension-points: the reference's compaction
		// listener precedes the hook bridges).
		d.pressureCompaction(msgs, func() {
			if t.aborted {
				d.endTurn(abortedReason(t.cause))
				return
			}
			// The snapshot candidate is built after the pressure
			// compaction, which may have shadowed the retained one. It
			// never opens a step alone: a first claim that brought
			// nothing still completes the turn empty.
			var snap messages.Message
			if len(msgs) > 0 || t.step > 0 {
				snap, _ = d.snapshotCandidate()
			}
			if d.cfg.PreStep {
				d.phase = phPreStep
				d.hookRef = d.ref()
				t.snapshot = snap
				d.emit(RunPreStepEffect{Ref: d.hookRef, Turn: t.turn, Step: t.step + 1, Messages: slices.Clone(msgs),
					Snapshot: snap})
				return
			}
			dec := PreStepDecision{Messages: msgs}
			if !snap.IsZero() {
				dec.Entries = []Entry{MessageEntry(snap)}
			}
			_, batch, n, _ := enterBatch(dec)
			d.enter(nil, batch, n)
		})
	}
}

// PreStepDone delivers the pre-step hook's decision.
func (d *Driver) PreStepDone(ref uint64, dec PreStepDecision, err error) Effects {
	if d.phase != phPreStep || ref != d.hookRef {
		return d.flush()
	}
	t := d.t
	snap := t.snapshot
	t.snapshot = messages.Message{}
	switch {
	case t.aborted:
		d.endTurn(abortedReason(t.cause))
	case err != nil:
		d.failTurn(t.step+1, err)
	default:
		preface, batch, n, verr := enterBatch(withSnapshot(dec, snap, t.step > 0))
		switch {
		case verr != nil:
			d.failTurn(t.step+1, verr)
		case dec.Reject:
			if len(preface) > 0 {
				d.appendDrafts(appendTag{}, preface...)
			}
			t.stopAfter = true
			d.endTurn(session.TurnEndReason{Kind: session.EndBlocked})
		default:
			d.enter(preface, batch, n)
		}
	}
	return d.flush()
}

// TurnStoppingDone delivers the end of the turn-stopping hook.
func (d *Driver) TurnStoppingDone(ref uint64, err error) Effects {
	if d.phase != phTurnStopping || ref != d.hookRef {
		return d.flush()
	}
	t := d.t
	switch {
	case t.aborted:
		d.endTurn(abortedReason(t.cause))
	case err != nil:
		d.failTurn(t.step, err)
	default:
		t.stoppingRan = true
		d.claim(inbox.NextStep)
	}
	return d.flush()
}

// StreamChunk delivers chunk c of call ref.
func (d *Driver) StreamChunk(ref uint64, c messages.StreamChunk) Effects {
	if d.cmp != nil && ref != 0 && ref == d.cmp.streamRef {
		d.compactionChunk(c)
		return d.flush()
	}
	if d.phase != phStream || ref != d.t.streamRef {
		return d.flush()
	}
	t := d.t
	if t.aborted {
		// The abort stopped the stream (docs/agent-loop.md#cancellation: the
		// chunks so far, no finish chunk); what was already in flight is
		// dropped.
		return d.flush()
	}
	if c.Type() == messages.ChunkFinish {
		if k := c.Reason().Kind; k == messages.FinishError || k == messages.FinishAborted {
			t.failedFinish = true
		}
	}
	if t.tooLarge != nil {
		return d.flush() // the step ends in error at the stream's end
	}
	draft := session.AssistantChunk{Turn: t.turn, Step: t.step, Chunk: c}.Draft()
	if err := session.CheckDraftSize(draft); err != nil {
		t.tooLarge = fmt.Errorf("a stream chunk is too large to record: %w", err)
		return d.flush()
	}
	d.appendDrafts(appendTag{chunk: true}, draft)
	t.asm.Push(c)
	return d.flush()
}

// StreamEnded delivers the end of call ref.
func (d *Driver) StreamEnded(ref uint64, finish messages.FinishReason, cancelled bool) Effects {
	if d.cmp != nil && ref != 0 && ref == d.cmp.streamRef {
		d.compactionStreamDone(finish, cancelled)
		return d.flush()
	}
	if d.phase != phStream || ref != d.t.streamRef {
		return d.flush()
	}
	d.t.streamRef = 0
	d.settle(func() { d.streamDone(finish, cancelled) })
	d.chunkRefsTaken() // no longer streaming: an empty queue drops its array
	return d.flush()
}

// RetryTimerFired delivers the backoff timer of generation gen.
func (d *Driver) RetryTimerFired(gen uint64) Effects {
	if d.phase != phRetryWait || gen != d.t.timerGen {
		return d.flush()
	}
	t := d.t
	d.appendDrafts(appendTag{}, session.NewDraft(session.TypeLlmRetryStarted,
		llm.RetryStartedData(retryID(t), t.turn, t.step, t.attempt-1)))
	d.beginAttempt()
	return d.flush()
}

// ToolEmitted appends a draft a running tool asked for. Call.Emit has
// refused a draft too large to record; one that got here anyway is
// dropped rather than refused by the session, which would crash the agent.
func (d *Driver) ToolEmitted(ref uint64, dr session.Draft) Effects {
	if d.t == nil || session.CheckDraftSize(dr) != nil {
		return d.flush()
	}
	for _, c := range d.t.calls {
		if c.ref == ref && c.started && !c.done {
			d.appendDrafts(appendTag{}, dr)
			break
		}
	}
	return d.flush()
}

// ToolDone delivers the result of tool call ref.
func (d *Driver) ToolDone(ref uint64, r Result) Effects {
	if d.phase != phTools {
		return d.flush()
	}
	t := d.t
	for i := range t.calls {
		c := &t.calls[i]
		if c.ref == ref && c.started && !c.done {
			c.done, c.result = true, r
			t.running--
			if t.running == 0 {
				t.exclusive = false
			}
			d.scheduleTools()
			d.commitTools()
			break
		}
	}
	return d.flush()
}

// ContextPushed delivers the inbox's answer to context push ref: its
// splice is committed, or the send was refused (the context is then lost,
// as a refused loop insert leaves the inbox unchanged). The step's commit
// goes on.
func (d *Driver) ContextPushed(ref uint64) Effects {
	if d.t == nil || !d.t.pushes[ref] {
		return d.flush()
	}
	delete(d.t.pushes, ref)
	if d.phase == phTools && len(d.t.pushes) == 0 {
		d.commitTools()
	}
	return d.flush()
}

// ---- the turn (docs/agent-loop.md#turns-and-steps) ----------------------

func abortedReason(c session.CancelCause) session.TurnEndReason {
	return session.TurnEndReason{Kind: session.EndAborted, Cause: c}
}

func (d *Driver) startTurn() {
	d.lastTurn++
	d.t = &turnState{turn: d.lastTurn, firstClaim: true}
	d.wakeRequested = false
	d.setStatus(StatusRunning)
	d.emit(NewSignalEffect{})
	d.appendDrafts(appendTag{}, session.TurnStart{Turn: d.t.turn}.Draft())
	// The claim's splice must follow turn/start in the log: the inbox
	// appends it, so the turn/start must be committed first.
	d.settle(func() {
		if d.t.aborted {
			d.endTurn(abortedReason(d.t.cause))
			return
		}
		d.claim(inbox.NextTurn)
	})
}

func (d *Driver) claim(target inbox.Target) {
	d.phase = phClaim
	d.claimRef = d.ref()
	d.emit(ClaimEffect{Ref: d.claimRef, Target: target, Turn: d.t.turn})
}

// enter is the step boundary's entry (docs/agent-loop.md#turns-and-steps):
// break, complete empty, or open a step. preface is recorded first in every
// case; batch (nmsgs of which are messages) opens the step, or, when it holds
// no message, is recorded with the preface (its log-only events are not
// lost).
func (d *Driver) enter(preface, batch []session.Draft, nmsgs int) {
	t := d.t
	if nmsgs == 0 {
		preface = append(preface, batch...)
	}
	if len(preface) > 0 {
		d.appendDrafts(appendTag{}, preface...)
	}
	switch {
	case t.ends != nil && nmsgs == 0:
		if d.cfg.TurnStopping && !t.stoppingRan {
			d.phase = phTurnStopping
			d.hookRef = d.ref()
			d.emit(RunTurnStoppingEffect{Ref: d.hookRef, Turn: t.turn})
			return
		}
		d.endTurn(*t.ends)
		return
	case t.step == 0 && nmsgs == 0:
		t.stopAfter = true
		d.endTurn(session.TurnEndReason{Kind: session.EndCompleted})
		return
	}
	t.step++
	t.stoppingRan, t.stepEndRan = false, false
	t.retries = nil
	t.attempt = 0
	t.overflows = 0
	t.system = d.system
	drafts := append([]session.Draft{session.StepStart{Turn: t.turn, Step: t.step}.Draft()}, batch...)
	d.appendDrafts(appendTag{}, drafts...)
	d.beginAttempt()
}

// finishStep appends step/end and decides what follows
// (docs/agent-loop.md#turns-and-steps).
func (d *Driver) finishStep(out stepOutcome, failure messages.LlmFailure) {
	t := d.t
	d.appendDrafts(appendTag{}, session.StepEnd{Turn: t.turn, Step: t.step}.Draft())
	switch out {
	case outAborted:
		d.endTurn(abortedReason(t.cause))
		return
	case outError:
		d.emit(TurnErrorEffect{Turn: t.turn, Step: t.step, Error: failure})
		t.stopAfter = true
		d.endTurn(session.TurnEndReason{Kind: session.EndError, Error: failure})
		return
	case outMaxTokens:
		t.maxTokens = true
	}
	switch {
	case t.maxTokens:
		t.ends = &session.TurnEndReason{Kind: session.EndMaxTokens}
	case out == outCompleted:
		t.ends = &session.TurnEndReason{Kind: session.EndCompleted}
	default:
		t.ends = nil
	}
	// The next claim's splice must follow step/end (the tool results'
	// context pushes are committed before it).
	d.settle(func() {
		if t.aborted {
			d.endTurn(abortedReason(t.cause))
			return
		}
		d.claim(inbox.NextStep)
	})
}

// failTurn ends the turn in error between steps (a hook or a callback
// failed at a step boundary): agent/error names step, the step that ended
// or the one that would have started.
func (d *Driver) failTurn(step int64, err error) {
	t := d.t
	f := messages.LlmFailure{Message: err.Error(), Code: llm.CodeUnknown}
	d.emit(TurnErrorEffect{Turn: t.turn, Step: step, Error: f})
	t.stopAfter = true
	d.endTurn(session.TurnEndReason{Kind: session.EndError, Error: f})
}

// endTurn appends turn/end and, once it is committed, either runs the
// next turn or goes idle (docs/agent-loop.md#turns-and-steps).
func (d *Driver) endTurn(reason session.TurnEndReason) {
	t := d.t
	t.ending = true
	d.appendDrafts(appendTag{}, session.TurnEnd{Turn: t.turn, Reason: reason}.Draft())
	d.settle(func() {
		d.phase = phIdle
		next := false
		switch {
		case d.disposed:
		case t.aborted || reason.Kind == session.EndAborted:
			// Only a latched wake continues after an abort
			// (docs/agent-loop.md#delivery).
			next = d.wakeRequested && d.pendingTurn+d.pendingStep > 0
		case t.stopAfter || reason.Kind == session.EndBlocked || reason.Kind == session.EndError:
			// parked until the next waking send
			// (docs/session-log.md#where-dsh-differs-from-the-reference)
		default:
			next = d.pendingTurn > 0 || (d.stepWoke && d.pendingStep > 0)
		}
		d.wakeRequested = false
		if next {
			d.startTurn()
			return
		}
		d.t = nil
		d.setStatus(StatusIdle)
	})
}

// ---- the step (docs/agent-loop.md#building-a-request) ------------------

// seedConfig is the request's seed config
// (docs/agent-loop.md#building-a-request).
func (d *Driver) seedConfig() messages.CallConfig {
	folded, has := d.mirror.RequestHeader()
	if d.firstRequest || !has {
		cfg := messages.CallConfig{Provider: d.cfg.Provider, Model: d.cfg.Model, MaxTokens: d.cfg.MaxTokens}
		if has && folded.Config.Provider == cfg.Provider && folded.Config.Model == cfg.Model &&
			!folded.AdapterDefaults.ReasoningEffort {
			cfg.ReasoningEffort = folded.Config.ReasoningEffort
		}
		return cfg
	}
	cfg := folded.Config
	if folded.AdapterDefaults.ReasoningEffort {
		cfg.ReasoningEffort = ""
	}
	if folded.AdapterDefaults.MaxTokens {
		cfg.MaxTokens = messages.OptInt{}
	}
	return cfg
}

// beginAttempt builds the attempt's config and header drafts, then, once
// the log has settled, dispatches the request built from it.
func (d *Driver) beginAttempt() {
	t := d.t
	t.attempt++
	cfg := d.seedConfig()
	if d.cfg.Request != nil {
		c, err := d.cfg.Request(RequestInput{Turn: t.turn, Step: t.step, Seed: cfg})
		if err != nil {
			d.finishStep(outError, messages.LlmFailure{Message: err.Error(), Code: llm.CodeUnknown})
			return
		}
		cfg = c
	}
	if err := cfg.Validate(); err != nil {
		d.finishStep(outError, messages.LlmFailure{Message: err.Error(), Code: llm.CodeUnknown})
		return
	}
	// The route's adapter fills what the config leaves out,
	// and the header marks those fields.
	route, err := d.route(cfg)
	if err != nil {
		d.finishStep(outError, messages.LlmFailure{Message: err.Error(), Code: llm.CodeUnknown})
		return
	}
	var marks session.AdapterDefaults
	if cfg.ReasoningEffort == "" && route.ReasoningEffort != "" {
		cfg.ReasoningEffort, marks.ReasoningEffort = route.ReasoningEffort, true
	}
	if _, has := cfg.MaxTokens.Get(); !has {
		if _, ok := route.MaxTokens.Get(); ok {
			cfg.MaxTokens, marks.MaxTokens = route.MaxTokens, true
		}
	}
	if err := cfg.Validate(); err != nil {
		d.finishStep(outError, messages.LlmFailure{Message: err.Error(), Code: llm.CodeUnknown})
		return
	}
	t.cfg = cfg
	header := session.NewEpochHeader(cfg, marks, t.system, d.cfg.Tools).Canonical()
	folded, has := d.mirror.RequestHeader()
	var drafts []session.Draft
	switch {
	case d.firstRequest && !has:
		drafts = append(drafts, session.RequestHeader{Header: header, Reason: session.ReasonInitial}.Draft())
	case d.firstRequest:
		drafts = append(drafts, session.RequestHeader{Header: header, Reason: session.ReasonResume}.Draft())
	case !folded.Equal(header):
		drafts = append(drafts, session.RequestHeader{Header: header, Reason: session.ReasonChange}.Draft())
	}
	d.firstRequest = false
	if rc, has := d.mirror.RequestContext(); !has || rc.Provider != cfg.Provider || rc.Model != cfg.Model ||
		rc.ContextWindow != route.ContextWindow {
		drafts = append(drafts, session.RequestContext{Provider: cfg.Provider, Model: cfg.Model,
			ContextWindow: route.ContextWindow}.Draft())
	}
	if len(drafts) > 0 {
		d.appendDrafts(appendTag{}, drafts...)
	}
	d.settle(func() {
		if t.aborted {
			d.finishStep(outAborted, messages.LlmFailure{})
			return
		}
		d.dispatch()
	})
}

// route returns what the configuration knows of cfg's route. The Routes
// callback is the embedder's code, run inside Receive: its panic is
// recovered and is the callback's error (as a hook's is, see
// recoverHook), which ends the turn in error; letting it crash the actor
// would restart it and interrupt the turn for a fault a restart cannot
// mend.
func (d *Driver) route(cfg messages.CallConfig) (r Route, err error) {
	if d.cfg.Routes == nil {
		return Route{}, nil
	}
	defer recoverCallback("routes", &err)
	return d.cfg.Routes(cfg.Provider, cfg.Model), nil
}

// dispatch builds the request from the mirror and starts the call.
func (d *Driver) dispatch() {
	t := d.t
	msgs := d.mirror.DeriveMessages().Slice()
	if invariants.Enabled {
		// Request reconstruction (docs/session-log.md#invariants): the
		// request is the log's projection, re-derived from scratch, under the
		// folded header.
		scratch := session.DeriveFromScratch(d.mirror.Events().Slice())
		_ = invariants.Assertf(slices.EqualFunc(msgs, scratch, messages.Message.Equal),
			"agent: request messages differ from the log's projection")
		h, ok := d.mirror.RequestHeader()
		_ = invariants.Assertf(ok && h.Config.Equal(t.cfg) && h.System == t.system,
			"agent: request config differs from the folded header")
	}
	req := llm.NewRequest(t.cfg, t.system, msgs, d.cfg.Tools).WithSession(string(d.mirror.ID()))
	t.asm.Reset()
	t.chunkSeqs = nil
	t.failedFinish = false
	t.tooLarge = nil
	t.streamRef = d.ref()
	d.phase = phStream
	d.emit(StartStreamEffect{Ref: t.streamRef, Request: req})
}

func retryID(t *turnState) string { return fmt.Sprintf("retry-%d-%d-%d", t.turn, t.step, t.attempt) }

// streamDone handles the end of an attempt, once its chunks are
// committed (docs/agent-loop.md#turns-and-steps).
func (d *Driver) streamDone(finish messages.FinishReason, cancelled bool) {
	t := d.t
	src := messages.ModelSource{Provider: t.cfg.Provider, Model: t.cfg.Model}
	usage, hasUsage := t.asm.Usage()
	if t.aborted || cancelled {
		// An attempt that had already failed (its error finish arrived before
		// the abort) writes no assistant message: the abort landed in
		// request-error (docs/agent-loop.md#cancellation), and its chunks
		// belong to a failed attempt.
		if blocks := t.asm.InterruptedBlocks(); len(blocks) > 0 && !t.failedFinish {
			m, err := messages.NewAssistantMessage(blocks, src)
			if err == nil {
				draft := session.AssistantMessage{Turn: t.turn, Step: t.step, Message: m,
					Usage: usage, HasUsage: hasUsage, Interrupted: true}.Draft().WithSources(t.chunkSeqs)
				if session.CheckDraftSize(draft) == nil {
					d.appendDrafts(appendTag{}, draft)
				}
			}
		}
		d.finishStep(outAborted, messages.LlmFailure{})
		return
	}
	if t.tooLarge != nil {
		d.finishStep(outError, tooLargeFailure(t.tooLarge))
		return
	}
	if finish.Kind == messages.FinishError || finish.Kind == messages.FinishAborted {
		d.failedAttempt(finish.Failure)
		return
	}
	src.ReplayState = t.asm.ReplayState()
	blocks := t.asm.Blocks()
	m, err := messages.NewAssistantMessage(blocks, src)
	if err != nil {
		d.finishStep(outError, messages.LlmFailure{Message: err.Error(), Code: llm.CodeUnknown})
		return
	}
	draft := session.AssistantMessage{Turn: t.turn, Step: t.step, Message: m,
		Usage: usage, HasUsage: hasUsage}.Draft().WithSources(t.chunkSeqs)
	if err := session.CheckDraftSize(draft); err != nil {
		// The log could not hold the message (its reader would refuse the
		// record): the step ends without it, the turn in error.
		d.finishStep(outError, tooLargeFailure(fmt.Errorf("the assistant message is too large to record: %w", err)))
		return
	}
	d.appendDrafts(appendTag{}, draft)
	var calls []toolCall
	if finish.Kind != messages.FinishMaxTokens {
		for _, b := range blocks {
			if b.Type() == messages.BlockToolCall {
				calls = append(calls, toolCall{block: b, input: parseInput(b.Arguments()), seq: -1})
			}
		}
	}
	switch {
	case finish.Kind == messages.FinishMaxTokens:
		d.finishStep(outMaxTokens, messages.LlmFailure{})
	case len(calls) == 0:
		d.finishStep(outCompleted, messages.LlmFailure{})
	default:
		// Tools start once the anchor is committed: a cancel that lands in
		// between gives every call a synthetic pair
		// (docs/agent-loop.md#cancellation). The tool bookkeeping is the
		// step's: a previous tool step of the turn left its cursors at the
		// end of its own calls.
		t.calls, t.next, t.commitIdx, t.running, t.exclusive, t.concludes = calls, 0, 0, 0, false, false
		clear(t.pushes)
		d.settle(func() {
			d.phase = phTools
			d.scheduleTools()
			d.commitTools()
		})
	}
}

// CodeMessageTooLarge is the failure code of a turn that ended because
// the model's output could not be recorded: a stream chunk or the
// assistant message assembled from a stream was longer than a log record
// may be (session.DefaultMaxRecordBytes).
const CodeMessageTooLarge = "MESSAGE_TOO_LARGE"

func tooLargeFailure(err error) messages.LlmFailure {
	return messages.LlmFailure{Code: CodeMessageTooLarge, Message: "agent: " + err.Error()}
}

// failedAttempt is docs/agent-loop.md#errors-and-retries: retry inside the
// step, or end the turn in error. No assistant message is written.
func (d *Driver) failedAttempt(f messages.LlmFailure) {
	if f.Code == "" {
		f.Code = llm.CodeUnknown
	}
	if f.Message == "" {
		f.Message = f.Code
	}
	if d.overflowCompaction(f) {
		return
	}
	d.requestError(f)
}

// requestError runs the request-error hook and the retry policy over a
// failed attempt's failure.
func (d *Driver) requestError(f messages.LlmFailure) {
	t := d.t
	dec := DecideDefault
	if d.cfg.RequestError != nil {
		var err error
		dec, err = d.cfg.RequestError(RequestErrorInput{Turn: t.turn, Step: t.step, Provider: t.cfg.Provider,
			Failure: f, Attempt: t.attempt})
		if err != nil {
			d.finishStep(outError, messages.LlmFailure{Message: err.Error(), Code: llm.CodeUnknown})
			return
		}
	}
	policy := d.cfg.Retry
	key := t.cfg.Provider + "\x00" + policy.Key()
	if t.retries == nil {
		t.retries = map[string]int{}
	}
	n := t.retries[key] + 1
	delay, ok := time.Duration(0), false
	switch dec {
	case DecideRetry:
		if delay, ok = policy.Decide(n, f, nil); !ok {
			delay, ok = policy.WithDefaults().InitialDelay, true
		}
	case DecideRetryHeld:
		delay, ok = HeldRetryDelay, true
	case DecideDefault:
		if !d.cfg.NoRetry {
			delay, ok = policy.Decide(n, f, nil)
		}
	}
	if !ok {
		d.finishStep(outError, f)
		return
	}
	t.retries[key] = n
	d.appendDrafts(appendTag{}, session.NewDraft(session.TypeLlmRetry, policy.RetryData(llm.RetryEvent{
		RetryID: retryID(t), Turn: t.turn, Step: t.step, Provider: t.cfg.Provider, Retry: n, Delay: delay, Failure: f})))
	t.timerGen++
	d.phase = phRetryWait
	d.emit(StartTimerEffect{Gen: t.timerGen, Delay: delay})
}

// ---- tool calls (docs/agent-loop.md#tool-calls) ------------------------

// modeOf classifies a call with the Modes callback (a tool's Mode). The
// callback is the embedder's code, run inside Receive: its panic is
// recovered and is the error of that call alone, answered as a panicking
// tool body's is (TOOL_PANIC, see runTool), so that the log stays
// balanced, the model sees why, and the other calls run. The rejected
// alternative, the reference's "internal scheduler failure" (the turn
// ends in error with the call unanswered until crash repair), punishes
// the whole turn for one tool's fault.
func (d *Driver) modeOf(c *toolCall) (m Mode, err error) {
	if d.cfg.Modes == nil {
		return Exclusive, nil
	}
	defer func() {
		if v := recover(); v != nil {
			m, err = Exclusive, fmt.Errorf("tool %q mode panicked: %v", c.block.Name(), v)
		}
	}()
	return d.cfg.Modes(c.block.Name(), c.input), nil
}

// scheduleTools starts calls in model order: an exclusive call alone, a
// run of parallel calls in a rolling pool of MaxParallelTools. A call
// whose mode cannot be told is answered at once with its error result
// (its body never runs, so it needs no slot in the pool).
func (d *Driver) scheduleTools() {
	t := d.t
	for !t.aborted && t.next < len(t.calls) && !t.exclusive {
		c := &t.calls[t.next]
		mode, err := d.modeOf(c)
		if err != nil {
			d.recordCall(t.next)
			c.done, c.result = true, errorResult("ToolPanicError", "TOOL_PANIC", err)
			t.next++
			continue
		}
		if mode == Exclusive {
			if t.running > 0 {
				return
			}
			t.exclusive = true
		} else if t.running >= d.cfg.MaxParallelTools {
			return
		}
		d.startCall(t.next)
		t.next++
	}
}

// startCall records call i's tool/call and runs it.
func (d *Driver) startCall(i int) {
	t := d.t
	c := &t.calls[i]
	d.recordCall(i)
	t.running++
	b := c.block
	d.emit(RunToolEffect{Ref: c.ref, Call: Call{Turn: t.turn, Step: t.step, ID: b.ID(), Name: b.Name(),
		Arguments: b.Arguments(), Input: c.input}})
}

// recordCall marks call i started and appends its tool/call (whose seq
// its result cites).
func (d *Driver) recordCall(i int) {
	t := d.t
	c := &t.calls[i]
	c.started = true
	c.ref = d.ref()
	b := c.block
	d.appendDrafts(appendTag{toolCall: i + 1}, session.ToolCall{Turn: t.turn, Step: t.step, CallID: b.ID(),
		Name: b.Name(), Arguments: b.Arguments()}.Draft())
}

// commitTools commits settled results strictly in model order; after an
// abort, each never-started call gets a synthetic tool/call + tool/result
// pair once the calls before it are committed.
func (d *Driver) commitTools() {
	t := d.t
	for t.commitIdx < len(t.calls) {
		if len(t.pushes) > 0 {
			return // the last result's contexts are not spliced yet
		}
		c := &t.calls[t.commitIdx]
		if !c.started {
			if !t.aborted {
				return
			}
			c.started, c.done, c.result = true, true, abortedBeforeDispatch()
			b := c.block
			d.appendDrafts(appendTag{toolCall: t.commitIdx + 1}, session.ToolCall{Turn: t.turn, Step: t.step,
				CallID: b.ID(), Name: b.Name(), Arguments: b.Arguments()}.Draft())
			t.next = max(t.next, t.commitIdx+1)
			return // the result needs the call's seq
		}
		if !c.done || c.seq < 0 {
			return
		}
		resultDraft := func(r Result) session.Draft {
			msg := messages.NewToolResultMessage(c.block.ID(), r.Content, r.IsError)
			return session.ToolResult{Turn: t.turn, Step: t.step, Message: msg, Error: r.Error,
				Meta: r.Meta}.Draft().WithSources([]int64{c.seq})
		}
		r := c.result
		draft := resultDraft(r)
		if err := session.CheckDraftSize(draft); err != nil {
			// The log could not hold this result (its reader would refuse
			// the record): the model is told so instead, and the turn goes
			// on. The result's contexts still ride.
			r = tooLargeResult(c.block.Name(), r, err)
			draft = resultDraft(r)
		}
		d.appendDrafts(appendTag{}, draft)
		for _, m := range r.AdditionalContexts {
			ref := d.ref()
			if t.pushes == nil {
				t.pushes = map[uint64]bool{}
			}
			t.pushes[ref] = true
			d.emit(PushContextEffect{Ref: ref, Message: m})
		}
		if r.ConcludesTurn {
			t.concludes = true
		}
		c.committed = true
		t.commitIdx++
	}
	if len(t.pushes) > 0 {
		return // step/end follows the last result's splices
	}
	out := outMore
	switch {
	case t.aborted:
		out = outAborted
	case t.concludes:
		out = outCompleted
	}
	d.finishStep(out, messages.LlmFailure{})
}
