package agent

import (
	"errors"
	"fmt"

	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/session"
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

// The pure core: the driver is the turn/step state machine of
// docs/agent-loop.md#turns-and-steps. It has no goroutines, no clock and
// no I/O: Step takes one input (step.go) and returns the effects
// (effects.go) the shell must perform, in order. Appends are pipelined: the
// core issues Append effects and learns the seqs from the acknowledgements
// (appended), which arrive in issue order. Where it needs seqs or a
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

// driverConfig configures a driver. Provider and Model are required.
type driverConfig struct {
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
	// when they do, the core asks the shell to run them (runPreStepEffect,
	// runTurnStoppingEffect, runStepEndEffect) and waits for the answer.
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

// defaultMaxParallelTools is the reference's DEFAULT_MAX_PARALLEL_TOOL_CALLS.
const defaultMaxParallelTools = 10

// Validate reports a missing provider or model, or a negative pool.
func (c driverConfig) Validate() error {
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
	phClaim              // waiting for claimed
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

// driver is the agent's pure core. Not safe for concurrent use: it
// belongs to the agent actor.
type driver struct {
	cfg    *driverConfig // shared by the drivers of one Template: read only
	mirror *session.Log
	out    effects

	refs     uint64
	inflight int                  // appends not acknowledged yet
	tags     map[uint64]appendTag // by append ref (chunks: chunkRefs)
	// chunkRefs are the refs of the chunk appends in flight, in the order
	// made: they are acknowledged in that order, so the oldest is found
	// first, without the map insert and delete per chunk that tags cost.
	// chunkRefs[:chunkHead] are acknowledged already. The array is kept
	// while a stream runs (at a model's pace each chunk is acknowledged
	// before the next: reallocating it would cost an allocation per chunk) and
	// dropped once the queue empties after it.
	chunkRefs []uint64
	chunkHead int
	// chunkDrafts is the block the streamed chunks' drafts are made in,
	// chunkDraftBlock at a time: each chunk's append effect holds a slice
	// of one element of it, which is never written again (the shell hands
	// it to the session as it is), instead of a slice allocated per
	// chunk. Dropped when the stream ends.
	chunkDrafts []session.Draft
	// chunkEffs is the block their append effects are made in, the same
	// way: the driver emits each as a chunkAppendEffect, a pointer into
	// it, which an effect list holds without boxing it (boxing the
	// effect itself was an allocation per chunk). Dropped when the
	// stream ends.
	chunkEffs []appendEffect
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

// newDriver returns a driver over a session whose log so far is past
// (the mirror is restored from it). The log must not have an open turn:
// crash repair closes it before an agent runs on it.
func newDriver(cfg driverConfig, h session.Header, past []session.Event) (*driver, error) {
	ds, err := newDriverShared(cfg)
	if err != nil {
		return nil, err
	}
	return newDriverFrom(ds, h, past)
}

// driverShared is a driver configuration prepared once (validated, with
// its defaults) and shared, read only, by every driver made from it.
type driverShared struct {
	cfg  driverConfig
	comp CompactionConfig // cfg.Compaction with defaults
}

func newDriverShared(cfg driverConfig) (*driverShared, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxParallelTools == 0 {
		cfg.MaxParallelTools = defaultMaxParallelTools
	}
	return &driverShared{cfg: cfg, comp: cfg.Compaction.withDefaults()}, nil
}

// newDriverFrom is newDriver over a prepared configuration.
func newDriverFrom(ds *driverShared, h session.Header, past []session.Event) (*driver, error) {
	cfg := &ds.cfg
	m, err := session.Restore(h, past)
	if err != nil {
		return nil, fmt.Errorf("agent: mirror the log: %w", err)
	}
	if turn, _, open := m.OpenTurn(); open {
		return nil, fmt.Errorf("agent: the log has turn %d open; repair it first", turn)
	}
	d := &driver{cfg: cfg, mirror: m, tags: map[uint64]appendTag{}, firstRequest: true, system: cfg.System,
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
func (d *driver) Status() Status { return d.status }

// LastTurn returns the number of the last turn started.
func (d *driver) LastTurn() int64 { return d.lastTurn }

// Idle reports whether the agent is quiescent: no turn, no append in
// flight, no latched wake.
func (d *driver) Idle() bool {
	return d.phase == phIdle && d.inflight == 0 && !d.wakeRequested && !d.maintenance
}

// Disposed reports whether Dispose was called.
func (d *driver) Disposed() bool { return d.disposed }

// System returns the system prompt the next step will use.
func (d *driver) System() string { return d.system }

// SendTarget returns the list send s must go to: a waking send that
// arrives after the running turn's abort fired is forced to next-turn
// (docs/agent-loop.md#delivery), so that it runs as its own turn when the
// latched wake replays, rather than riding as steering into whatever
// claims next-step first.
func (d *driver) SendTarget(s inbox.Send) inbox.Target {
	if s.Wake && d.t != nil && d.t.aborted {
		return inbox.NextTurn
	}
	return s.Target
}

func (d *driver) ref() uint64 {
	d.refs++
	return d.refs
}

func (d *driver) emit(e effect) { d.out = append(d.out, e) }

func (d *driver) flush() effects {
	out := d.out
	d.out = nil
	return out
}

// chunkDraftBlock is the number of chunk drafts made at a time.
const chunkDraftBlock = 16

// chunkDraft returns a slice of the one draft dr, made in the chunk draft
// block (see chunkDrafts).
func (d *driver) chunkDraft(dr session.Draft) []session.Draft {
	if len(d.chunkDrafts) == cap(d.chunkDrafts) {
		d.chunkDrafts = make([]session.Draft, 0, chunkDraftBlock)
	}
	d.chunkDrafts = append(d.chunkDrafts, dr)
	n := len(d.chunkDrafts)
	return d.chunkDrafts[n-1 : n : n]
}

// maxRecycled bounds the array recycle keeps (a turn's start or end
// emits a handful of effects; a chunk one).
const maxRecycled = 16

// recycle gives back eff, effects a Step returned, once the caller has
// performed them and keeps nothing of the list itself (the values it
// holds may live on): the next Step fills the same array instead of
// making one, an allocation per input, so per streamed chunk. A caller
// that keeps the effects of one Step past the next (the core's tests)
// does not call it. An idle driver keeps none (nor the list it may hold
// already): an idle session holds no buffers.
func (d *driver) recycle(eff effects) {
	if d.phase == phIdle {
		d.out = nil
		return
	}
	if d.out != nil || cap(eff) == 0 || cap(eff) > maxRecycled {
		return
	}
	clear(eff)
	d.out = eff[:0]
}

func (d *driver) appendDrafts(tag appendTag, drafts ...session.Draft) {
	r := d.ref()
	d.inflight++
	switch {
	case tag == appendTag{chunk: true}:
		d.chunkRefs = append(d.chunkRefs, r)
		if len(d.chunkEffs) == cap(d.chunkEffs) {
			d.chunkEffs = make([]appendEffect, 0, chunkDraftBlock)
		}
		d.chunkEffs = append(d.chunkEffs, appendEffect{Ref: r, Drafts: drafts})
		d.emit(chunkAppendEffect{&d.chunkEffs[len(d.chunkEffs)-1]})
		return
	case tag != appendTag{}:
		d.tags[r] = tag
	}
	d.emit(appendEffect{Ref: r, Drafts: drafts})
}

// settle runs fn once every append in flight is acknowledged (now, if
// none is).
func (d *driver) settle(fn func()) {
	d.phase = phSettle
	if d.inflight == 0 {
		fn()
		return
	}
	d.settled = fn
}

func (d *driver) setStatus(s Status) {
	if d.status != s {
		d.status = s
		d.emit(statusEffect{Status: s})
	}
}
