package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/dshgo/dsh/actors/persister"
)

// onNotice receives the persister's notices for every session.
func (h *Host) onNotice(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case persister.Durable:
		e := h.entryOf(m.ID)
		if e == nil {
			return
		}
		e.durable.Store(m.Seq)
		if e.clearFailure(m.Seq) {
			h.logger.Info("session write recovered", "session", string(m.ID), "durable", m.Seq)
		}
		now := time.Since(h.epoch)
		e.turnEndsDurable(m.Seq, func(seq int64, at time.Duration) {
			d := now - at
			if h.metrics != nil {
				h.metrics.TurnDurable(d)
			}
			if h.cfg.OnTurnDurable != nil {
				h.cfg.OnTurnDurable(m.ID, seq, d)
			}
		})
	case persister.WriteFailed:
		// The one place a host hears of write failures and retries. A
		// run of failures is one warning (its first); the failed
		// retries after it are at debug, and the write that succeeds
		// is the info record of the recovery (Durable, above).
		e := h.entryOf(m.ID)
		if e != nil {
			e.writeFailures.Add(1)
			e.setFailure(m.Err, e.durable.Load())
		}
		level := slog.LevelWarn
		if m.Attempt > 1 {
			level = slog.LevelDebug
		}
		msg := "session write failed"
		if errors.Is(m.Err, persister.ErrFenced) {
			// Another writer took the session (its lock, or a newer
			// writer's revision): retrying will not help until it goes.
			msg = "session write fenced"
		}
		h.logger.Log(context.Background(), level, msg, "session", string(m.ID),
			"attempt", m.Attempt, "retry_in", m.RetryIn, "err", m.Err)
		if h.metrics != nil {
			h.metrics.WriteFailed()
		}
		if h.cfg.OnWriteFailed != nil {
			h.cfg.OnWriteFailed(m.ID, m.Err)
		}
	case persister.Retrying:
		e := h.entryOf(m.ID)
		if e != nil {
			e.writeRetries.Add(1)
		}
	}
}
