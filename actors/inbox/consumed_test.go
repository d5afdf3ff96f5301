package inbox

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

func turnEnd(turn int64, kind session.TurnEndKind) session.Draft {
	r := session.TurnEndReason{Kind: kind}
	switch kind {
	case session.EndAborted:
		r.Cause = session.CancelCause{Kind: session.CauseUser}
	case session.EndError:
		r.Error = messages.LlmFailure{Message: "boom", Code: "SERVER", Status: 500}
	}
	return session.TurnEnd{Turn: turn, Reason: r}.Draft()
}

// workedTurn appends a turn that claims target's input and runs one step.
func workedTurn(t *testing.T, s *State, l *session.Log, turn int64, target Target) {
	t.Helper()
	appendOK(t, l, session.TurnStart{Turn: turn}.Draft())
	commit(t, s, l, s.planClaim(target, turn)...)
	appendOK(t, l, session.StepStart{Turn: turn, Step: 1}.Draft())
	appendOK(t, l, session.StepEnd{Turn: turn, Step: 1}.Draft())
	appendOK(t, l, turnEnd(turn, session.EndCompleted))
}

func fold(t *testing.T, l *session.Log) consumedWork {
	t.Helper()
	w, err := foldConsumedWork(l.Events().All())
	require.NoError(t, err)
	return w
}

// Scenario 41, first case.
func TestConsumedWorkReportsATurnThatClaimedItsInputAndFailedBeforeAnyStep(t *testing.T) {
	for _, kind := range []session.TurnEndKind{session.EndBlocked, session.EndAborted, session.EndInterrupted, session.EndError} {
		t.Run(string(kind), func(t *testing.T) {
			s, l := newState(t, Config{}), newLog(t)
			commit(t, s, l, must(t)(s.planAppend(NextStep, pluginContext(t, "ctx"), External)))
			commit(t, s, l, must(t)(s.planAppend(NextTurn, user(t, "prompt"), External)))
			commit(t, s, l, must(t)(s.planAppend(NextTurn, user(t, "later"), External)))
			appendOK(t, l, session.TurnStart{Turn: 1}.Draft())
			commit(t, s, l, s.planClaim(NextTurn, 1)...)
			appendOK(t, l, turnEnd(1, kind))

			w := fold(t, l)
			require.Empty(t, w.Worked)
			require.Empty(t, w.Dropped, "a claim is not a drop")
			require.Len(t, w.Failed, 1)
			require.Equal(t, int64(1), w.Failed[0].Turn)
			require.Equal(t, kind, w.Failed[0].Reason)
			require.Equal(t, []string{"ctx", "prompt"}, texts(w.Failed[0].Claimed))

			// The parked prompt runs in a later turn, which worked.
			workedTurn(t, s, l, 2, NextTurn)
			w = fold(t, l)
			require.Equal(t, []int64{2}, w.Worked)
			require.Len(t, w.Failed, 1)
		})
	}
}

// Scenario 41, second case: a claim is accounted to its own turn and is
// never a drop, whatever it emptied; a turn whose claim found nothing (the
// woken message was removed first) failed nothing, and the removal is the
// drop.
func TestConsumedWorkIgnoresAClaimItsOwnTurnEmptied(t *testing.T) {
	s, l := newState(t, Config{}), newLog(t)
	commit(t, s, l, must(t)(s.planAppend(NextTurn, user(t, "p1"), External)))
	commit(t, s, l, must(t)(s.planAppend(NextStep, user(t, "steer"), External)))
	workedTurn(t, s, l, 1, NextTurn) // empties both lists
	require.Zero(t, s.Len())

	// A wake while idle opens turn 2, but its prompt is removed before
	// the claim: the claim is empty and the turn ends without a step.
	gone := user(t, "gone")
	commit(t, s, l, must(t)(s.planAppend(NextTurn, gone, External)))
	appendOK(t, l, session.TurnStart{Turn: 2}.Draft())
	p, ok := s.planRemove(gone.ID())
	require.True(t, ok)
	commit(t, s, l, p)
	require.Empty(t, s.planClaim(NextTurn, 2))
	appendOK(t, l, turnEnd(2, session.EndAborted))

	w := fold(t, l)
	require.Equal(t, []int64{1}, w.Worked)
	require.Empty(t, w.Failed)
	require.Len(t, w.Dropped, 1)
	require.True(t, w.Dropped[0].Equal(gone))
}

// Scenario 41, third case.
func TestConsumedWorkKeepsAReplacementPendingRatherThanCountingItAsDropped(t *testing.T) {
	s, l := newState(t, Config{}), newLog(t)
	first := user(t, "draft")
	commit(t, s, l, must(t)(s.planAppend(NextTurn, first, External)))
	commit(t, s, l, must(t)(s.planReplace(first.ID(), user(t, "final"))))
	cleared := user(t, "cleared")
	commit(t, s, l, must(t)(s.planAppend(NextStep, cleared, External)))
	p, ok := s.planRemove(cleared.ID())
	require.True(t, ok)
	commit(t, s, l, p)

	w := fold(t, l)
	require.Len(t, w.Dropped, 1, "only the removal that inserted nothing drops")
	require.True(t, w.Dropped[0].Equal(cleared))
	require.Empty(t, w.Worked)
	require.Empty(t, w.Failed)

	r, err := Rebuild(l.Events().All(), 0, Config{})
	require.NoError(t, err)
	require.Equal(t, []string{"final"}, texts(r.NextTurn()), "the replacement stays pending")
}
