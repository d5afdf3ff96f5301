package logreplay

import (
	"cmp"
	"slices"
	"sync"

	"github.com/google/uuid"

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

type stepKey struct{ turn, step int64 }

type retryKey struct {
	turn, step int64
	retry      int64
}

// recordedTool is what one recorded tool call answers: its result, the
// log-only events recorded during it, and the inbox inserts recorded right
// after its result (additional contexts).
type recordedTool struct {
	result   session.ToolResult
	emits    []session.Draft
	contexts []messages.Message
	// aborted: the recorded result is the one a tool that honoured a
	// cancellation yields (ABORTED): the replayed tool blocks until the
	// turn is cancelled (docs/replay.md).
	aborted bool
}

type delivery uint8

const (
	deliverFollowup delivery = iota
	deliverSteer
	deliverInject
	appendForeign
)

// action is one input the driver sends at a recorded position: an inbox
// insert, or a foreign event dsh's hooks have no place for.
type action struct {
	pos      int  // position in the recording (compared order)
	idle     bool // recorded between turns: wait for the agent to be idle
	kind     delivery
	messages []messages.Message
	draft    session.Draft
}

// plan is what a run takes from the recording.
type plan struct {
	header  session.Header
	seed    []session.Event
	events  []session.Event
	hasHead bool
	config  messages.CallConfig // of the first request/header
	system  string
	tools   []messages.ToolSchema

	mu      sync.Mutex
	results map[string][]*recordedTool // by call id, in recorded order

	// preStep holds the foreign events recorded between a turn's first
	// claim and its step/start (step 1 only: at a later boundary they are
	// the step-end hook's); stepEnd the contributions recorded at the
	// boundary after a step (between its step/end and what the loop does
	// next), delivered by the agent's step-end hook; preStream the foreign
	// events recorded after a request's header and before its first chunk,
	// by the seq of that chunk, appended by the provider before it streams.
	preStep    map[stepKey][]session.Draft
	stepEnd    map[stepKey][]boundaryItem
	preStream  map[int64][]session.Draft
	entered    map[stepKey][]item
	stepConfig map[stepKey]messages.CallConfig
	retries    map[retryKey]bool
	turnEnds   map[int64]session.TurnEndReason
	// Where a recorded turn was cancelled outside a stream
	// (docs/replay.md): steps is every recorded step/start (a pre-step of
	// an aborted turn with no recorded step is where it was cancelled);
	// held the retries whose backoff the cancellation cut (an llm/retry
	// with no llm/retry-started after it in its aborted turn).
	steps map[stepKey]bool
	held  map[retryKey]bool
	// cutCompactions are the seqs of the compaction/starts whose
	// compaction the turn's cancellation cut (compaction/end with an
	// error and no summary, in a turn that ended aborted), in order.
	cutCompactions []int64
	routes         map[routeKey]agent.Route
	actions        []action

	// Compaction: the recorded compaction ids, in order (handed out to
	// the agent's compactions), and the summariser's maxTokens.
	compactionIDs       []string
	compactionMaxTokens messages.OptInt
}

type routeKey struct{ provider, model string }

// boundaryItem is one contribution recorded at a step boundary: the
// step-end hook's operation, and the driver's action that stands in for
// it where dsh runs no step-end hook (after a step that ended its turn
// aborted or in error). A cancellation has no stand-in (dropped, as
// elsewhere).
type boundaryItem struct {
	op     agent.StepEndOp
	action *action
}

// route returns the recorded route of provider and model: the adapter
// defaults its headers mark and the context window its request/context
// logs.
func (p *plan) route(provider, model string) agent.Route {
	return p.routes[routeKey{provider, model}]
}

type zone uint8

const (
	zIdle zone = iota
	zPreStep
	zEnter
	zPostEnter
	zStream
	zTool
	zToolDone
)

// seedLen returns the length of the recording's seed prefix: through its
// last session/end-seed, or the header's seedLength, or 0.
func seedLen(h session.Header, events []session.Event) int {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Type() == session.TypeEndSeed {
			return i + 1
		}
	}
	if n, ok := h.SeedLength.Get(); ok && n <= int64(len(events)) {
		return int(n)
	}
	return 0
}

func newPlan(h session.Header, events []session.Event) *plan {
	p := &plan{header: h, events: events, results: map[string][]*recordedTool{},
		preStep: map[stepKey][]session.Draft{}, entered: map[stepKey][]item{},
		stepEnd: map[stepKey][]boundaryItem{}, preStream: map[int64][]session.Draft{},
		stepConfig: map[stepKey]messages.CallConfig{}, retries: map[retryKey]bool{},
		turnEnds: map[int64]session.TurnEndReason{}, routes: map[routeKey]agent.Route{},
		steps: map[stepKey]bool{}, held: map[retryKey]bool{}}
	n := seedLen(h, events)
	p.seed = events[:n]
	order, _ := normalOrder(events)
	var (
		z          = zIdle
		turn, step int64
		open       *recordedTool
		last       *recordedTool
		cfg        messages.CallConfig
		hasCfg     bool
		// the step whose step/end the walk is after (nil: not at a step
		// boundary)
		boundary *stepKey
		// the stream of the current attempt has not started: foreign
		// events wait in prestream for its first chunk
		streamIdle bool
		prestream  []action
		pending    = map[string][]messages.MessageID{} // the recorded inbox lists
		// the last llm/retry of the current step not yet followed by its
		// llm/retry-started
		waiting *retryKey
	)
	// The first request/header of the whole log (the seed included) gives
	// the system prompt and the tools; the last one before the live part
	// gives the config in force.
	// Every header and request/context tells what its route materialises
	// and its context window.
	for _, e := range events {
		switch pl := e.Payload().(type) {
		case session.RequestHeader:
			if !p.hasHead {
				// What the caller asked for: the replay's route fills the
				// adapter's defaults in again and marks them, as the
				// recording's adapter did.
				p.hasHead, p.config, p.system, p.tools = true, pl.Header.CallerConfig(), pl.Header.System, pl.Header.Tools()
			}
			c := pl.Header.Config
			k := routeKey{c.Provider, c.Model}
			r := p.routes[k]
			if pl.Header.AdapterDefaults.ReasoningEffort {
				r.ReasoningEffort = c.ReasoningEffort
			}
			if pl.Header.AdapterDefaults.MaxTokens {
				r.MaxTokens = c.MaxTokens
			}
			p.routes[k] = r
		case session.RequestContext:
			k := routeKey{pl.Provider, pl.Model}
			r := p.routes[k]
			r.ContextWindow = pl.ContextWindow
			p.routes[k] = r
		}
	}
	for _, e := range events[:n] {
		if rh, ok := e.Payload().(session.RequestHeader); ok {
			cfg, hasCfg = rh.Header.CallerConfig(), true
		}
		if tt, ok := e.Payload().(session.TurnStart); ok {
			turn = tt.Turn
		}
	}
	key := func() stepKey { return stepKey{turn, step} }
	// flushPrestream gives foreign events that did not precede a chunk
	// back to the driver.
	flushPrestream := func() {
		p.actions = append(p.actions, prestream...)
		prestream = nil
	}
	// atBoundary records contribution it of the boundary in progress.
	atBoundary := func(it boundaryItem) { p.stepEnd[*boundary] = append(p.stepEnd[*boundary], it) }
	setStepConfig := func() {
		if _, ok := p.stepConfig[key()]; !ok && hasCfg && step > 0 {
			p.stepConfig[key()] = cfg
		}
	}
	for pos, i := range order {
		if i < n {
			continue
		}
		e := events[i]
		t := e.Type()
		if t != session.TypeInboxSpliced && t.IsCore() {
			last = nil
		}
		if t.IsCore() && t != session.TypeAssistantChunk {
			flushPrestream()
		}
		switch pl := e.Payload().(type) {
		case session.TurnStart:
			z, turn, step, boundary = zPreStep, pl.Turn, 0, nil
		case session.TurnEnd:
			z = zIdle
			p.turnEnds[pl.Turn] = pl.Reason
			if waiting != nil && pl.Reason.Kind == session.EndAborted {
				p.held[*waiting] = true
			}
			waiting = nil
			if boundary != nil && (pl.Reason.Kind == session.EndAborted || pl.Reason.Kind == session.EndError ||
				pl.Reason.Kind == session.EndInterrupted) {
				// The step ended the turn: dsh runs no step-end hook here.
				for _, it := range p.stepEnd[*boundary] {
					if it.action != nil {
						p.actions = append(p.actions, *it.action)
					}
				}
				delete(p.stepEnd, *boundary)
			}
			boundary = nil
		case session.StepStart:
			z, step, boundary, waiting = zEnter, pl.Step, nil, nil
			p.entered[key()] = nil
			p.steps[key()] = true
		case session.StepEnd:
			setStepConfig()
			z = zPreStep
			k := key()
			boundary = &k
		case session.UserMessage:
			if (z == zEnter || z == zPostEnter) && e.SurfaceOp().Kind() == session.OpAppend {
				p.entered[key()] = append(p.entered[key()], item{msg: pl.Message})
			}
		case session.RequestHeader:
			cfg, hasCfg = pl.Header.CallerConfig(), true
			setStepConfig()
			z, streamIdle = zStream, true
		case session.RequestContext:
			setStepConfig()
			z, streamIdle = zStream, true
		case session.AssistantChunk:
			setStepConfig()
			if len(prestream) > 0 {
				for _, a := range prestream {
					p.preStream[e.Seq()] = append(p.preStream[e.Seq()], a.draft)
				}
				prestream = nil
			}
			z, streamIdle = zStream, false
		case session.AssistantMessage:
			setStepConfig()
			z, streamIdle = zStream, false
		case session.ToolCall:
			open = &recordedTool{}
			p.results[pl.CallID] = append(p.results[pl.CallID], open)
			z = zTool
		case session.ToolResult:
			rt := open
			if rt == nil {
				rt = &recordedTool{}
				p.results[pl.Message.Source().CallID()] = append(p.results[pl.Message.Source().CallID()], rt)
			}
			rt.result = pl
			rt.aborted = pl.Error.Code == "ABORTED"
			open, last, z = nil, rt, zToolDone
		case session.InboxSpliced:
			ins := pl.Inserted()
			removed := splice(pending, pl)
			if len(ins) == 0 {
				if boundary != nil && pl.Outcome == "canceled" {
					// A plugin cancelled pending input at the boundary.
					for _, id := range removed {
						atBoundary(boundaryItem{op: agent.RemoveOp(id)})
					}
				}
				break
			}
			inTurn := z != zIdle
			if inTurn && last != nil && pl.Target == string(inbox.NextStep) {
				last.contexts = append(last.contexts, ins...)
				break
			}
			a := action{pos: pos, idle: !inTurn, messages: ins}
			switch {
			case pl.Target == string(inbox.NextTurn):
				a.kind = deliverFollowup
			case inTurn || nextCoreIsTurnStart(events, order[pos+1:]):
				a.kind = deliverSteer
			default:
				a.kind = deliverInject
			}
			if boundary != nil {
				for _, m := range ins {
					op := agent.SteerOp(m)
					if a.kind == deliverFollowup {
						op = agent.FollowupOp(m)
					}
					one := a
					one.messages = []messages.Message{m}
					atBoundary(boundaryItem{op: op, action: &one})
				}
				break
			}
			p.actions = append(p.actions, a)
		case session.EndSeed:
		default:
			if t == session.TypeLlmRetry {
				r, _ := e.Data().Field("retry")
				rn, _ := r.AsInt()
				k := retryKey{turn, step, rn}
				p.retries[k], waiting = true, &k
				break
			}
			if t == session.TypeLlmRetryStarted {
				streamIdle = true // the retried attempt has not streamed yet
				waiting = nil
				break
			}
			if isCompaction(t) {
				// dsh's agent compacts itself: the recording gives its ids
				// and the summariser's maxTokens.
				p.noteCompaction(e)
				break
			}
			// A log-only contribution: a foreign event, todo/write or a
			// compaction event. A pre-step hook may contribute foreign
			// (or unknown) events only.
			d := draftOf(e)
			switch {
			case z == zTool && open != nil:
				open.emits = append(open.emits, d)
			case boundary != nil && !t.IsCore():
				atBoundary(boundaryItem{op: agent.EventOp(d), action: &action{pos: pos, kind: appendForeign, draft: d}})
			case z == zPreStep && !t.IsCore():
				k := stepKey{turn, step + 1}
				p.preStep[k] = append(p.preStep[k], d)
			case z == zStream && streamIdle && !t.IsCore():
				prestream = append(prestream, action{pos: pos, kind: appendForeign, draft: d})
			case (z == zEnter || z == zPostEnter) && !t.IsCore():
				p.entered[key()] = append(p.entered[key()], item{draft: d, event: true})
				z = zPostEnter
			default:
				p.actions = append(p.actions, action{pos: pos, idle: z == zIdle, kind: appendForeign, draft: d})
			}
		}
	}
	flushPrestream()
	p.cutCompactions = cutCompactions(events[n:], p.turnEnds)
	slices.SortStableFunc(p.actions, func(a, b action) int { return cmp.Compare(a.pos, b.pos) })
	return p
}

// splice applies a recorded splice to the recorded inbox lists (by id) and
// returns the ids it removed. The recording is valid, so the bounds hold;
// they are clamped anyway.
func splice(lists map[string][]messages.MessageID, pl session.InboxSpliced) []messages.MessageID {
	l := lists[pl.Target]
	start := min(max(pl.Start, 0), int64(len(l)))
	n, _ := pl.RemovedCount.Get()
	end := min(start+max(n, 0), int64(len(l)))
	removed := slices.Clone(l[start:end])
	var ins []messages.MessageID
	for _, m := range pl.Inserted() {
		ins = append(ins, m.ID())
	}
	lists[pl.Target] = slices.Concat(l[:start], ins, l[end:])
	return removed
}

func isCompaction(t session.EventType) bool {
	switch t {
	case session.TypeCompactionStart, session.TypeCompactionSum, session.TypeCompactionPrune, session.TypeCompactionEnd:
		return true
	}
	return false
}

func (p *plan) noteCompaction(e session.Event) {
	switch e.Type() {
	case session.TypeCompactionStart:
		if v, ok := e.Data().Field("compactionId"); ok {
			if id, ok := v.AsString(); ok {
				p.compactionIDs = append(p.compactionIDs, id)
			}
		}
	case session.TypeCompactionSum:
		if v, ok := e.Data().Field("maxTokens"); ok {
			if n, ok := v.AsInt(); ok {
				if _, has := p.compactionMaxTokens.Get(); !has {
					p.compactionMaxTokens = messages.Some(n)
				}
			}
		}
	}
}

// nextCompactionID hands out the recorded compaction ids in order, then
// fresh ones.
func (p *plan) nextCompactionID() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.compactionIDs) == 0 {
		return uuid.NewString()
	}
	id := p.compactionIDs[0]
	p.compactionIDs = p.compactionIDs[1:]
	return id
}

func nextCoreIsTurnStart(events []session.Event, rest []int) bool {
	for _, i := range rest {
		if t := events[i].Type(); t.IsCore() {
			return t == session.TypeTurnStart
		}
	}
	return false
}

// draftOf re-creates a recorded event as a draft (its seq citations are
// kept as recorded: the logs line up when the replay conforms).
func draftOf(e session.Event) session.Draft {
	d := session.NewDraft(e.Type(), e.Data())
	if op := e.SurfaceOp(); op.Kind() != session.OpNone {
		d = d.WithSurface(op)
	}
	if s, ok := e.SourceEventSeqs(); ok {
		d = d.WithSources(s)
	}
	if e.Ignorable() {
		d = d.AsIgnorable()
	}
	return d
}

// takeResult pops the next recorded answer of call id.
func (p *plan) takeResult(id string) (*recordedTool, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.results[id]
	if len(q) == 0 {
		return nil, false
	}
	p.results[id] = q[1:]
	return q[0], true
}

// item is one recorded item of a step's enter batch: a user message or
// a log-only event.
type item struct {
	msg   messages.Message
	draft session.Draft
	event bool
}

// enter is the recorded step's enter batch with the claimed messages in
// it: each recorded message is the claimed one with its id when there is
// one, else the recorded (plugin) message; recorded log-only events keep
// their places; claimed messages the recording does not have follow.
// Without a recorded step, the claimed batch enters as is.
func (p *plan) enter(k stepKey, claimed []messages.Message) []agent.Entry {
	rec, ok := p.entered[k]
	if !ok {
		out := make([]agent.Entry, 0, len(claimed))
		for _, c := range claimed {
			out = append(out, agent.MessageEntry(c))
		}
		return out
	}
	used := make([]bool, len(claimed))
	out := make([]agent.Entry, 0, len(rec)+len(claimed))
	for _, r := range rec {
		if r.event {
			out = append(out, agent.EventEntry(r.draft))
			continue
		}
		m := r.msg
		for j, c := range claimed {
			if !used[j] && c.ID() == r.msg.ID() {
				used[j], m = true, c
				break
			}
		}
		out = append(out, agent.MessageEntry(m))
	}
	for j, c := range claimed {
		if !used[j] {
			out = append(out, agent.MessageEntry(c))
		}
	}
	return out
}

var _ agent.Tool = (*replayTool)(nil)

// cutCompactions returns the seqs of the compaction/starts whose
// compaction ended in error without a summary, inside a turn that ended
// aborted: the cancellation landed in the summariser call.
func cutCompactions(events []session.Event, ends map[int64]session.TurnEndReason) []int64 {
	type open struct {
		start   int64
		summary bool
	}
	byID := map[string]*open{}
	var out []int64
	field := func(e session.Event, k string) (messages.JSON, bool) { return e.Data().Field(k) }
	for _, e := range events {
		switch e.Type() {
		case session.TypeCompactionStart, session.TypeCompactionSum, session.TypeCompactionEnd:
		default:
			continue
		}
		idJ, _ := field(e, "compactionId")
		id, _ := idJ.AsString()
		switch e.Type() {
		case session.TypeCompactionStart:
			byID[id] = &open{start: e.Seq()}
		case session.TypeCompactionSum:
			if o := byID[id]; o != nil {
				o.summary = true
			}
		case session.TypeCompactionEnd:
			o := byID[id]
			_, failed := field(e, "error")
			turnJ, _ := field(e, "turn")
			turn, hasTurn := turnJ.AsInt()
			if o != nil && failed && !o.summary && hasTurn && ends[turn].Kind == session.EndAborted {
				out = append(out, o.start)
			}
			delete(byID, id)
		}
	}
	return out
}
