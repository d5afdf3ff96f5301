package agent

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// Compaction (docs/agent-loop.md#compaction). The driver compacts the surface
// when a request overflows the model's context window (context-overflow),
// when the next request would exceed floor(contextWindow × ThresholdRatio) at
// pre-step (pressure), and on a Compact message between turns (manual). A
// compaction is the durable bracket
//
//	compaction/start {compactionId, turn}
//	compaction/summary {compactionId, summary, rawOutput, llmStreamCall,
//	    shadowedRange, shadowedSeqs, shadowedTokenCount, provider, model,
//	    maxTokens?, usage?}
//	user/message (source {kind:plugin, plugin:compact, compactionId},
//	    surfaceOp replace {start, end},
//	    sourceEventSeqs [startSeq, summarySeq, ...shadowedSeqs])
//	compaction/end {compactionId, turn}
//
// or, when the summary fails, compaction/start … compaction/end
// {compactionId, turn, error} with the surface untouched.

// compactionPlugin is the plugin name of a compaction checkpoint's source.
const compactionPlugin = "compact"

// purposeCompaction is the llm.Request purpose of a summariser call.
const purposeCompaction = "compaction"

// compactionPreamble opens a checkpoint's content, before the
// <compacted-summary> tag.
const compactionPreamble = "This is an automatically generated checkpoint condensing an earlier span of the " +
	"conversation to free up context. Treat the captured context as established background and build on it " +
	"without restating it. Continue the task directly from the messages that follow, without acknowledging " +
	"this checkpoint.\n\n<compacted-summary>"

// compactionInstructionText is the final user message of a summariser request
// (sent to the model, never logged).
const compactionInstructionText = "Summarize the conversation above for a checkpoint that will replace it. " +
	"Keep every fact, decision, file, command and open task needed to continue the work; omit pleasantries. " +
	"Reply with the summary only."

// Compaction defaults (the reference's compaction-basic settings).
const (
	defaultCompactionThreshold = 0.8
	defaultCompactionRetain    = 0.16
	// maxOverflowCompactions bounds the context-overflow compactions of
	// one step, so that a request that still overflows after them fails.
	maxOverflowCompactions = 2
)

// CompactionConfig configures compaction. The zero value enables it with
// the defaults.
type CompactionConfig struct {
	// Disabled turns every trigger off (Compact is answered
	// CompactDisabled).
	Disabled bool
	// NoPressure turns the pre-step pressure trigger off.
	NoPressure bool
	// ThresholdRatio of the context window over which pressure compacts.
	// Default 0.8.
	ThresholdRatio float64
	// RetainRatio of the surface's estimated tokens kept verbatim as the
	// most recent tail. Default 0.16.
	RetainRatio float64
	// MaxTokens, when present, is the summariser call's maxTokens (and is
	// recorded in compaction/summary).
	MaxTokens messages.OptInt
	// EstimateTokens estimates a message's tokens. Default: 8 per message
	// plus a quarter of the bytes of its model-visible text (256 bytes
	// for an image). Called inside Receive; must not block. A
	// panic is recovered and is the compaction's failure: the turn ends
	// in error (a manual Compact is answered CompactFailed).
	EstimateTokens func(messages.Message) int
	// NewID mints compaction ids. Default: a random UUID. Called inside
	// Receive; a panic is recovered as EstimateTokens's is.
	NewID func() string
	// PruneToolResultBytes, when positive, turns the tool-result pruner
	// on: before the summariser call of a compaction inside a turn
	// (context-overflow, pressure), every tool result of the shadowed
	// span whose model-visible content exceeds this many bytes has its
	// content replaced by a short placeholder (compaction/prune, then a
	// content-only tool/result replace of that single node). A manual
	// compaction between turns does not prune: a tool/result replace
	// belongs inside a turn. Zero: off.
	PruneToolResultBytes int
}

// prunedToolResultText is the placeholder content of a pruned tool
// result; %d is the number of bytes removed.
const prunedToolResultText = "[tool result pruned by compaction: %d bytes omitted]"

func (c CompactionConfig) withDefaults() CompactionConfig {
	if c.ThresholdRatio <= 0 {
		c.ThresholdRatio = defaultCompactionThreshold
	}
	if c.RetainRatio <= 0 {
		c.RetainRatio = defaultCompactionRetain
	}
	if c.EstimateTokens == nil {
		c.EstimateTokens = estimateMessageTokens
	}
	if c.NewID == nil {
		c.NewID = uuid.NewString
	}
	return c
}

// CompactOutcome is how a compaction request ended.
type CompactOutcome uint8

const (
	// CompactDone: the surface was replaced by a checkpoint.
	CompactDone CompactOutcome = iota
	// CompactNothing: nothing to compact (the whole surface is the
	// retained tail, or the surface is empty); nothing was logged.
	CompactNothing
	// CompactBusy: a compaction is live (an unmatched compaction/start
	// after the newest session/end-seed), or a turn is running.
	CompactBusy
	// CompactFailed: the summary failed; compaction/end carries the
	// error and the surface is untouched.
	CompactFailed
	// CompactDisabled: compaction is disabled by the configuration.
	CompactDisabled
)

func (o CompactOutcome) String() string {
	switch o {
	case CompactDone:
		return "done"
	case CompactNothing:
		return "nothing"
	case CompactBusy:
		return "busy"
	case CompactFailed:
		return "failed"
	}
	return "disabled"
}

// errCompactBusy is the error of a CompactBusy outcome.
var errCompactBusy = errors.New("agent: a compaction or a turn is running")

type compactTrigger uint8

const (
	trigOverflow compactTrigger = iota
	trigPressure
	trigManual
)

// compaction is one compaction in flight.
type compaction struct {
	id        string
	trigger   compactTrigger
	turn      int64
	hasTurn   bool
	nodes     []int64 // shadowed surface nodes, in surface order
	msgs      []messages.Message
	tokens    int
	startSeq  int64
	sumSeq    int64
	streamRef uint64
	asm       llm.BlockAssembler
	cfg       messages.CallConfig
	genBefore int
	cancelled bool
	outcome   CompactOutcome
	err       string
	// fault is the panic of an embedder's callback (EstimateTokens,
	// NewID) that failed the compaction: the trigger fails its turn with
	// it, where a failed summary only takes the ordinary path.
	fault error
	then  func(CompactOutcome)
}

// compactDoneEffect answers a manual compaction (driver.Compact).
type compactDoneEffect struct {
	Ref          uint64
	Outcome      CompactOutcome
	CompactionID string
	Err          string
}

func (compactDoneEffect) isEffect() {}

// surfaceMessage is the model-visible message of surface node seq (zero
// for an empty completion anchor).
func (d *driver) surfaceMessage(seq int64) messages.Message {
	e, ok := d.mirror.Event(seq)
	if !ok {
		return messages.Message{}
	}
	switch p := e.Payload().(type) {
	case session.UserMessage:
		return p.Message
	case session.AssistantMessage:
		if p.Message.NumBlocks() == 0 {
			return messages.Message{}
		}
		return p.Message
	case session.ToolResult:
		return p.Message
	}
	return messages.Message{}
}

// recoverCallback turns the panic of an embedder's callback run inside
// Receive (EstimateTokens, NewID, Routes) into its error, as recoverHook
// does for hooks: the caller fails the turn (or the manual compaction),
// and the agent lives on. Letting it crash the actor would restart it and
// interrupt the turn for a fault a restart cannot mend. Deferred by the
// caller (recover works only in the deferred function itself).
func recoverCallback(name string, err *error) {
	if v := recover(); v != nil {
		*err = fmt.Errorf("agent: %s callback panicked: %v", name, v)
	}
}

// newID mints a compaction id; the error is NewID's panic.
func (d *driver) newID() (id string, err error) {
	defer recoverCallback("new-id", &err)
	return d.comp.NewID(), nil
}

// compactionLive reports whether the log has an unmatched
// compaction/start after its newest session/end-seed (the durable lock).
func (d *driver) compactionLive() bool { return len(d.openCompactions) > 0 }

// observeCompaction folds the lock and the replace generation from a
// committed event.
func (d *driver) observeCompaction(e session.Event) {
	switch e.Type() {
	case session.TypeEndSeed:
		clear(d.openCompactions)
	case session.TypeCompactionStart, session.TypeCompactionEnd:
		v, _ := e.Data().Field("compactionId")
		id, _ := v.AsString()
		if e.Type() == session.TypeCompactionStart {
			d.openCompactions[id] = true
		} else {
			delete(d.openCompactions, id)
		}
	}
	if e.SurfaceOp().Kind() == session.OpReplace {
		d.replaceGen++
	}
}

// ReplaceGeneration returns the surface's replace generation: the number
// of surface replaces in the log.
func (d *driver) ReplaceGeneration() int { return d.replaceGen }

// Compacting reports whether a compaction of this driver is in flight.
func (d *driver) Compacting() bool { return d.cmp != nil }

// onCompact starts a manual compaction between turns
// (docs/agent-loop.md#compaction). Its outcome comes back as a
// compactDoneEffect with ref. While a turn or a compaction runs it is
// answered CompactBusy at once.
func (d *driver) onCompact(ref uint64) {
	reply := func(o CompactOutcome, id, err string) {
		d.emit(compactDoneEffect{Ref: ref, Outcome: o, CompactionID: id, Err: err})
	}
	switch {
	case d.cfg.Compaction.Disabled:
		reply(CompactDisabled, "", "agent: compaction is disabled")
	case d.phase != phIdle || d.t != nil || d.cmp != nil || d.inflight > 0 || d.disposed || d.maintenance:
		reply(CompactBusy, "", errCompactBusy.Error())
	default:
		d.phase = phCompact
		d.startCompaction(trigManual, 0, false, d.system, d.seedConfig(), func(o CompactOutcome) {
			c := d.lastCompaction
			reply(o, c.id, c.err)
			d.phase = phIdle
			d.wakeRequested = false
			if !d.disposed && (d.pendingTurn > 0 || d.pendingStep > 0 && d.stepWoke) {
				d.startTurn()
			}
		})
	}
}

// pressure reports whether the next request (the surface plus the
// entering messages, the system prompt and the tools) would exceed
// floor(contextWindow × ThresholdRatio) of the route in force. The error
// is the Routes or EstimateTokens callback's panic.
func (d *driver) pressure(entering []messages.Message) (bool, error) {
	if d.cfg.Compaction.Disabled || d.cfg.Compaction.NoPressure {
		return false, nil
	}
	route, err := d.route(d.seedConfig())
	if err != nil {
		return false, err
	}
	win, ok := route.ContextWindow.Get()
	if !ok || win <= 0 {
		return false, nil
	}
	limit := int64(float64(win) * d.comp.ThresholdRatio)
	n, err := d.estimate(d.mirror.DeriveMessages().Slice())
	if err != nil {
		return false, err
	}
	m, err := d.estimate(entering)
	if err != nil {
		return false, err
	}
	n += m + (len(d.system)+3)/4
	for _, s := range d.cfg.Tools {
		if j, err := messages.MarshalValue(s); err == nil {
			n += (j.Len() + 3) / 4
		}
	}
	return int64(n) > limit, nil
}

// startCompaction runs one compaction and calls then with its outcome once
// its bracket is committed (at once, with nothing logged, for
// CompactNothing and CompactBusy). The phase is the caller's.
func (d *driver) startCompaction(trig compactTrigger, turn int64, hasTurn bool, system string,
	cfg messages.CallConfig, then func(CompactOutcome)) {
	if d.compactionLive() || d.cmp != nil {
		d.lastCompaction = &compaction{outcome: CompactBusy, err: errCompactBusy.Error()}
		then(CompactBusy)
		return
	}
	nodes, msgs, tokens, err := d.compactionRange()
	if err == nil && (len(nodes) == 0 || len(msgs) == 0) {
		d.lastCompaction = &compaction{outcome: CompactNothing}
		then(CompactNothing)
		return
	}
	var id string
	if err == nil {
		id, err = d.newID()
	}
	if err != nil {
		// Nothing is logged: the bracket never opened.
		d.lastCompaction = &compaction{outcome: CompactFailed, err: err.Error(), fault: err}
		then(CompactFailed)
		return
	}
	if mt, ok := d.cfg.Compaction.MaxTokens.Get(); ok {
		cfg.MaxTokens = messages.Some(mt)
	}
	c := &compaction{id: id, trigger: trig, turn: turn, hasTurn: hasTurn, nodes: nodes, msgs: msgs,
		tokens: tokens, startSeq: -1, sumSeq: -1, cfg: cfg, genBefore: d.replaceGen, then: then}
	d.cmp = c
	var o messages.ObjectBuilder
	o.String("compactionId", c.id)
	if hasTurn {
		o.Int("turn", turn)
	} else {
		o.Raw("turn", messages.JSONNull)
	}
	d.appendDrafts(appendTag{compaction: compStart}, session.NewDraft(session.TypeCompactionStart, o.Build()))
	d.settle(func() {
		if c.cancelled {
			d.endCompaction(CompactFailed, "compaction aborted")
			return
		}
		d.pruneToolResults(c, func() { d.summarise(c, system) })
	})
}

// summarise starts the summariser call of compaction c.
func (d *driver) summarise(c *compaction, system string) {
	if c.cancelled {
		d.endCompaction(CompactFailed, "compaction aborted")
		return
	}
	msgs := append(c.msgs[:len(c.msgs):len(c.msgs)], compactionInstruction())
	req := llm.NewRequest(c.cfg, system, msgs, d.cfg.Tools).WithSession(string(d.mirror.ID())).
		WithPurpose(purposeCompaction)
	c.streamRef = d.ref()
	d.phase = phCompact
	d.emit(startStreamEffect{Ref: c.streamRef, Request: req})
}

func compactionInstruction() messages.Message {
	m, _ := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(compactionInstructionText)},
		messages.UserSource())
	return m
}

// compactionChunk feeds a summariser chunk (not logged).
func (d *driver) compactionChunk(c messages.StreamChunk) { d.cmp.asm.Push(c) }

// compactionStreamDone records the summary and the checkpoint, or the
// failure.
func (d *driver) compactionStreamDone(in streamEnded) {
	finish := in.Finish
	c := d.cmp
	c.streamRef = 0
	switch {
	case in.Cancelled || c.cancelled:
		d.endCompaction(CompactFailed, "compaction aborted")
		return
	case finish.Kind == messages.FinishError || finish.Kind == messages.FinishAborted:
		msg := finish.Failure.Message
		if msg == "" {
			msg = string(finish.Kind)
		}
		d.endCompaction(CompactFailed, "compaction summary failed: "+msg)
		return
	}
	raw := c.asm.Blocks()
	var summary []messages.ContentBlock
	for _, b := range raw {
		if b.Type() == messages.BlockText && strings.TrimSpace(b.Text()) != "" {
			summary = append(summary, b)
		}
	}
	if len(summary) == 0 {
		d.endCompaction(CompactFailed, "compaction summary is empty")
		return
	}
	if !d.shadowedStillCurrent() {
		d.endCompaction(CompactFailed, "the surface changed during the compaction")
		return
	}
	sumJ, err1 := messages.MarshalValue(summary)
	rawJ, err2 := messages.MarshalValue(raw)
	seqsJ, err3 := messages.MarshalValue(c.nodes)
	if err := errors.Join(err1, err2, err3); err != nil {
		d.endCompaction(CompactFailed, err.Error())
		return
	}
	var rng messages.ObjectBuilder
	rng.Int("start", c.nodes[0]).Int("end", c.nodes[len(c.nodes)-1])
	var o messages.ObjectBuilder
	o.String("compactionId", c.id).Raw("summary", sumJ).Raw("rawOutput", rawJ).Bool("llmStreamCall", true).
		Raw("shadowedRange", rng.Build()).Raw("shadowedSeqs", seqsJ).Int("shadowedTokenCount", int64(c.tokens)).
		String("provider", c.cfg.Provider).String("model", c.cfg.Model)
	if mt, ok := c.cfg.MaxTokens.Get(); ok {
		o.Int("maxTokens", mt)
	}
	if u, ok := c.asm.Usage(); ok {
		o.Raw("usage", u.JSON())
	}
	sum := session.NewDraft(session.TypeCompactionSum, o.Build())
	if err := session.CheckDraftSize(sum); err != nil {
		// The log could not hold the summary (its reader would refuse
		// the record): the compaction fails, the surface untouched.
		d.endCompaction(CompactFailed, "compaction summary is too large to record: "+err.Error())
		return
	}
	d.appendDrafts(appendTag{compaction: compSummary}, sum)
	d.settle(func() {
		content := make([]messages.ContentBlock, 0, len(summary)+2)
		content = append(content, messages.TextBlock(compactionPreamble))
		content = append(content, summary...)
		content = append(content, messages.TextBlock("</compacted-summary>"))
		var extra messages.ObjectBuilder
		extra.String("compactionId", c.id)
		src, err := messages.PluginSource(compactionPlugin, extra.Build())
		var m messages.Message
		if err == nil {
			m, err = messages.NewUserMessage(content, src)
		}
		if err != nil || !d.shadowedStillCurrent() {
			msg := "the surface changed during the compaction"
			if err != nil {
				msg = err.Error()
			}
			d.endCompaction(CompactFailed, msg)
			return
		}
		sources := append([]int64{c.startSeq, c.sumSeq}, c.nodes...)
		d.appendDrafts(appendTag{}, session.UserMessage{Message: m}.Draft().
			WithSurface(session.ReplaceOp(c.nodes[0], c.nodes[len(c.nodes)-1])).WithSources(sources))
		d.endCompaction(CompactDone, "")
	})
}

// shadowedStillCurrent reports whether the shadowed nodes are still a
// contiguous span of the surface (nothing else replaced them meanwhile).
func (d *driver) shadowedStillCurrent() bool {
	c := d.cmp
	all := d.mirror.SurfaceNodes()
	for i, s := range all {
		if s == c.nodes[0] {
			if i+len(c.nodes) > len(all) {
				return false
			}
			for j, n := range c.nodes {
				if all[i+j] != n {
					return false
				}
			}
			return true
		}
	}
	return false
}

// endCompaction appends compaction/end and, once it is committed, hands
// the outcome to the compaction's continuation.
func (d *driver) endCompaction(out CompactOutcome, errMsg string) {
	c := d.cmp
	c.outcome, c.err = out, errMsg
	var o messages.ObjectBuilder
	o.String("compactionId", c.id)
	if c.hasTurn {
		o.Int("turn", c.turn)
	} else {
		o.Raw("turn", messages.JSONNull)
	}
	if errMsg != "" {
		o.String("error", errMsg)
	}
	d.appendDrafts(appendTag{}, session.NewDraft(session.TypeCompactionEnd, o.Build()))
	d.settle(func() {
		d.cmp, d.lastCompaction = nil, c
		c.then(out)
	})
}

// cancelCompaction aborts the compaction in flight: its summariser call
// is cancelled and the bracket closes with an error.
func (d *driver) cancelCompaction() {
	c := d.cmp
	if c == nil || c.cancelled {
		return
	}
	c.cancelled = true
	if c.streamRef != 0 {
		d.emit(cancelStreamEffect{Ref: c.streamRef})
	}
}

// compactionSeq records the seq of a bracket event.
func (d *driver) compactionSeq(kind uint8, seq int64) {
	if d.cmp == nil {
		return
	}
	switch kind {
	case compStart:
		d.cmp.startSeq = seq
	case compSummary:
		d.cmp.sumSeq = seq
	}
}

const (
	compStart uint8 = iota + 1
	compSummary
)

// overflowCompaction is the context-overflow trigger
// (docs/agent-loop.md#errors-and-retries): compact, then retry the attempt in
// the same step only if the replace generation advanced; otherwise the
// failure takes the ordinary request-error path.
func (d *driver) overflowCompaction(f messages.LlmFailure) bool {
	t := d.t
	if d.cfg.Compaction.Disabled || f.Code != llm.CodeContextWindowExceeded || t.overflows >= maxOverflowCompactions {
		return false
	}
	t.overflows++
	d.phase = phCompact
	d.startCompaction(trigOverflow, t.turn, true, t.system, t.cfg, func(CompactOutcome) {
		switch {
		case t.aborted:
			d.finishStep(outAborted, messages.LlmFailure{})
		case d.lastCompaction.fault != nil:
			d.finishStep(outError, messages.LlmFailure{Message: d.lastCompaction.fault.Error(), Code: llm.CodeUnknown})
		case d.replaceGen > d.lastCompaction.genBefore && d.lastCompaction.outcome == CompactDone:
			d.beginAttempt()
		default:
			d.requestError(f)
		}
	})
	return true
}

// pressureCompaction is the pressure trigger, run at pre-step before the
// claimed batch is recorded; next continues the pre-step.
func (d *driver) pressureCompaction(entering []messages.Message, next func()) {
	t := d.t
	over, err := d.pressure(entering)
	if err != nil {
		// Before the pre-step, as a pre-step failure: the claimed
		// messages are not recorded.
		d.failTurn(t.step+1, err)
		return
	}
	if !over {
		next()
		return
	}
	d.phase = phCompact
	d.startCompaction(trigPressure, t.turn, true, d.system, d.seedConfig(), func(CompactOutcome) {
		if f := d.lastCompaction.fault; f != nil && !t.aborted {
			d.failTurn(t.step+1, f)
			return
		}
		next()
	})
}
