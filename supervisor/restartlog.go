package supervisor

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// watchFailures logs the failures of the host's actors that protoactor's
// supervision handles (docs/observability.md#log-records): a session's
// actor restarted (its session, agent, inbox or a stream actor), or
// stopped after too many restarts, with the session's id; a failure of
// the persister's actors. protoactor publishes each supervision decision
// on the actor system's event stream (actor.SupervisorEvent), whichever
// supervisor made it, so the host only listens there: the actors and
// their strategies are unchanged. It returns the unsubscribe function;
// nil when the host has no Config.Logger (nothing would be logged).
//
// Rejected alternative: spawning the host's actors under a guardian whose
// strategy logs. It sees only the actors spawned at the root (the session
// and the agent, not the agent's inbox and stream actors), and changes
// their parent.
func (h *Host) watchFailures() func() {
	if h.cfg.Logger == nil {
		return nil
	}
	prefix := h.name + "/"
	sub := h.sys.EventStream.Subscribe(func(evt any) {
		if e, ok := evt.(*actor.SupervisorEvent); ok && e.Child != nil && strings.HasPrefix(e.Child.Id, prefix) {
			h.logFailure(e)
		}
	})
	return func() { h.sys.EventStream.Unsubscribe(sub) }
}

// logFailure logs one supervision decision about an actor of the host.
func (h *Host) logFailure(e *actor.SupervisorEvent) {
	reason := fmt.Sprint(e.Reason)
	id, role, ok := h.sessionOfActor(e.Child.Id)
	if !ok {
		h.logger.Warn("host actor failed", "actor", e.Child.Id, "directive", e.Directive.String(), "reason", reason)
		return
	}
	switch e.Directive {
	case actor.RestartDirective:
		h.logger.Warn("session actor restarted", "session", id, "actor", role, "reason", reason)
	case actor.StopDirective:
		h.logger.Error("session actor stopped after failing", "session", id, "actor", role, "reason", reason)
	default:
		h.logger.Warn("session actor failed", "session", id, "actor", role, "directive", e.Directive.String(), "reason", reason)
	}
}

// sessionOfActor returns the session whose actors include the one named
// pid (the session actor, the agent, or an actor the agent spawned: its
// inbox, a stream) and that actor's name under the session ("session",
// "agent", "agent/inbox$3"...). It scans the resident sessions: failures
// are rare.
func (h *Host) sessionOfActor(pid string) (id, role string, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for sid, e := range h.sessions {
		select {
		case <-e.ready:
		default:
			continue // still starting: its pids are not set yet
		}
		if e.err != nil || e.session == nil {
			continue
		}
		base, found := strings.CutSuffix(e.session.Id, "session")
		if !found {
			continue
		}
		rest, found := strings.CutPrefix(pid, base)
		if found && (rest == "session" || rest == "agent" || strings.HasPrefix(rest, "agent/")) {
			return string(sid), rest, true
		}
	}
	return "", "", false
}

// logRetry logs a committed llm/retry event (a failed model call the
// agent retries after a delay) at info: docs/observability.md#log-records.
// The event's data is the agent's (llm.RetryPolicy.RetryData): the
// retry's number, its delay and the failure.
func logRetry(l *slog.Logger, id session.SessionID, ev session.Event) {
	d := ev.Data()
	attrs := []any{"session", string(id), "turn", intField(d, "turn"), "step", intField(d, "step"),
		"attempt", intField(d, "retry"), "delay", time.Duration(intField(d, "delayMs")) * time.Millisecond}
	if fj, ok := d.Field("failure"); ok {
		if f, err := messages.ParseLlmFailure(fj); err == nil {
			attrs = append(attrs, "failure", f.Code, "err", f.Message)
		}
	}
	l.Info("model call retried", attrs...)
}

// intField returns j's integer field key, 0 if it has none.
func intField(j messages.JSON, key string) int64 {
	v, ok := j.Field(key)
	if !ok {
		return 0
	}
	n, _ := v.AsInt()
	return n
}
