package inbox

import (
	"iter"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// consumedWork accounts for the input a log consumed
// (docs/agent-loop.md#the-inbox; the reference calls it foldConsumedWork):
// which turns did work, which turns took input and failed before doing any,
// and which input was dropped without running. Input still pending, or
// claimed by a turn that is still open, is in none of them. The slices are
// owned by the caller.
type consumedWork struct {
	// Worked lists, in order, the turns that did work: they have a
	// step/start. Their claimed input was run.
	Worked []int64
	// Failed lists the turns that claimed input and then ended blocked,
	// aborted, interrupted or error before any step/start: that input is
	// accounted for (it was taken, and the turn's end says why it did not
	// run), so it must not be reported as lost nor run again.
	Failed []failedTurn
	// Dropped lists the messages removed unrun by a canceled splice that
	// inserted nothing (remove, clear, a deleting splice). A canceled
	// splice that inserted something is a replacement: the new message
	// stays pending and the old one is not counted as dropped.
	Dropped []messages.Message
}

// failedTurn is a turn that claimed input and ended without a step.
type failedTurn struct {
	Turn    int64
	Reason  session.TurnEndKind
	Claimed []messages.Message // next-step messages first, then the prompt
}

// foldConsumedWork folds events into the consumedWork they record. It
// replays the inbox splices to know which messages each splice deleted, so
// pass the events the inbox was rebuilt from: a fork's child's events from
// its seedLength on, since a fork starts with an empty inbox. An invalid
// splice is a *SpliceError, as in Rebuild.
//
// The three cases are told apart by the splice shape and the turn
// brackets:
//   - a claim (a deleting splice with no outcome) inside a turn adds to
//     that turn's claimed input; it is never a drop, whatever it emptied;
//   - a turn with a step/start worked;
//   - a turn without one that claimed something and ended blocked,
//     aborted, interrupted or error failed; a turn that claimed nothing (a
//     wake whose message was removed before the claim) is ignored, and its
//     removed message counts as dropped;
//   - a canceled splice with nothing inserted drops what it deleted.
//
// A no-step turn that claimed input and ended completed or max-tokens
// does not occur in a log the loop writes and is in none of the lists.
func foldConsumedWork(events iter.Seq[session.Event]) (consumedWork, error) {
	var (
		w       consumedWork
		turn    int64 // the open turn; 0 if none
		stepped bool
		claimed []messages.Message
	)
	s := emptyState(Config{})
	for e := range events {
		switch p := e.Payload().(type) {
		case session.TurnStart:
			turn, stepped, claimed = p.Turn, false, nil
		case session.StepStart:
			stepped = true
		case session.TurnEnd:
			switch {
			case turn == 0:
			case stepped:
				w.Worked = append(w.Worked, turn)
			case len(claimed) > 0 && failedEnd(p.Reason.Kind):
				w.Failed = append(w.Failed, failedTurn{Turn: turn, Reason: p.Reason.Kind, Claimed: claimed})
			}
			turn, stepped, claimed = 0, false, nil
		case session.InboxSpliced:
			removed, err := s.replay(e)
			if err != nil {
				return consumedWork{}, err
			}
			switch {
			case p.Outcome == string(Canceled) && len(p.Inserted()) == 0:
				w.Dropped = append(w.Dropped, removed...)
			case p.Outcome == "" && turn != 0:
				claimed = append(claimed, removed...)
			}
		}
	}
	return w, nil
}

// failedEnd reports the turn-end kinds that mean claimed input did not run.
func failedEnd(k session.TurnEndKind) bool {
	switch k {
	case session.EndBlocked, session.EndAborted, session.EndInterrupted, session.EndError:
		return true
	}
	return false
}
