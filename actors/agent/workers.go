package agent

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// runTool runs a tool body in a goroutine owned by the actor, under the
// turn's abort signal. Emits and the result come back as messages, in
// that order (one goroutine sends both).
func (a *agentActor) runTool(e runToolEffect) {
	root, self, sig, ref := a.root, a.self, a.abortSignal(), e.Ref
	t, _ := a.cfg.Tools.lookup(e.Call.Name)
	call := e.Call
	var mu sync.Mutex // guards open
	open := true
	call.emit = func(dr session.Draft) {
		mu.Lock()
		defer mu.Unlock()
		if open {
			root.Send(self, toolEmitted{Ref: ref, Draft: dr})
		}
	}
	hooks := a.cfg.Hooks
	a.wg.Go(func() {
		r := executeCall(sig, t, call, hooks)
		mu.Lock()
		open = false
		mu.Unlock()
		root.Send(self, toolDone{Ref: ref, Result: r})
	})
}

func (a *agentActor) runPreStep(e runPreStepEffect) {
	root, self, sig, h := a.root, a.self, a.abortSignal(), a.cfg.Hooks.PreStep
	a.wg.Go(func() {
		dec, err := func() (dec PreStepDecision, err error) {
			defer recoverHook("pre-step", &err)
			return h.PreStep(sig, PreStepInput{Turn: e.Turn, Step: e.Step, Messages: e.Messages, Snapshot: e.Snapshot})
		}()
		root.Send(self, preStepDone{Ref: e.Ref, Decision: dec, Err: err})
	})
}

func (a *agentActor) runTurnStopping(e runTurnStoppingEffect) {
	root, self, sig, h := a.root, a.self, a.abortSignal(), a.cfg.Hooks.TurnStopping
	steer := func(m messages.Message) { root.Send(self, Steer{Message: m}) }
	a.wg.Go(func() {
		err := func() (err error) {
			defer recoverHook("turn-stopping", &err)
			return h.TurnStopping(sig, TurnStoppingInput{Turn: e.Turn, Steer: steer})
		}()
		root.Send(self, turnStoppingDone{Ref: e.Ref, Err: err})
	})
}

func (a *agentActor) runStepEnd(e runStepEndEffect) {
	root, self, sig, h := a.root, a.self, a.abortSignal(), a.cfg.Hooks.StepEnd
	a.wg.Go(func() {
		dec, err := func() (dec StepEndDecision, err error) {
			defer recoverHook("step-end", &err)
			return h.StepEnd(sig, StepEndInput{Turn: e.Turn, Step: e.Step})
		}()
		root.Send(self, stepEndDone{Ref: e.Ref, Decision: dec, Err: err})
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
	a.step(ctx, stepEndOpDone{Ref: r})
	return true
}
