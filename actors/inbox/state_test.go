package inbox

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

func TestClampFollowsJavaScriptSplice(t *testing.T) {
	// Expected values are what Array.prototype.splice does on a list of 3.
	for _, c := range []struct {
		start, count int64
		st, del      int
	}{
		{0, 1, 0, 1},
		{1, 5, 1, 2},
		{3, 1, 3, 0},
		{7, 1, 3, 0},
		{-1, 1, 2, 1},
		{-3, 2, 0, 2},
		{-9, 1, 0, 1},
		{1, -4, 1, 0},
		{-9223372036854775808, 9223372036854775807, 0, 3},
	} {
		st := clampStart(c.start, 3)
		require.Equal(t, c.st, st, "start %d", c.start)
		require.Equal(t, c.del, clampCount(c.count, 3, st), "splice(%d, %d)", c.start, c.count)
	}
}

// Scenario 39.
func TestInboxNormalizesSpliceCoordinatesRejectsDuplicateIdentitiesReportsMissingRemovals(t *testing.T) {
	s, l := newState(t, Config{}), newLog(t)
	a, b, c := userWithID(t, "a", "A"), userWithID(t, "b", "B"), userWithID(t, "c", "C")
	for _, m := range []messages.Message{a, b, c} {
		commit(t, s, l, must(t)(s.planAppend(NextStep, m, External)))
	}
	require.Equal(t, []string{"A", "B", "C"}, texts(s.NextStep()))

	// A negative start counts from the end; a deleting splice is canceled.
	p, ok, err := s.planSplice(NextStep, -1, 1, nil, External)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(2), p.Start())
	requireJSON(t, `{"target":"next-step","start":2,"removedCount":1,"inserted":[],"outcome":"canceled"}`, p.Draft().Data())
	n := commit(t, s, l, p)
	require.Equal(t, []string{"C"}, texts(n[0].Discarded))
	require.Empty(t, n[0].Inserted)

	// A start before the beginning clamps to 0.
	x := userWithID(t, "x", "X")
	p, ok, err = s.planSplice(NextStep, -100, 1, []messages.Message{x}, External)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(0), p.Start())
	require.Equal(t, 1, p.RemovedCount())
	commit(t, s, l, p)
	require.Equal(t, []string{"X", "B"}, texts(s.NextStep()))

	// A start past the end clamps to the length, the count to what is
	// left: an insert, with neither removedCount nor outcome.
	y := userWithID(t, "y", "Y")
	p, ok, err = s.planSplice(NextStep, 100, 5, []messages.Message{y}, External)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, Outcome(""), p.Outcome())
	requireJSON(t, `{"target":"next-step","start":2,"inserted":[`+y.JSON().String()+`]}`, p.Draft().Data())
	commit(t, s, l, p)

	// Splices that remove and insert nothing are no-ops.
	for _, c := range [][2]int64{{1, -3}, {10, 10}, {0, 0}} {
		_, ok, err := s.planSplice(NextStep, c[0], c[1], nil, External)
		require.NoError(t, err)
		require.False(t, ok, "splice(%d, %d)", c[0], c[1])
	}

	// Ids are unique across both lists and within one insert.
	_, err = s.planAppend(NextTurn, userWithID(t, "b", "again"), External)
	require.ErrorIs(t, err, ErrDuplicateID)
	_, _, err = s.planSplice(NextTurn, 0, 0, []messages.Message{userWithID(t, "z", "1"), userWithID(t, "z", "2")}, External)
	require.ErrorIs(t, err, ErrDuplicateID)
	_, err = s.planReplace("x", userWithID(t, "y", "steals y"))
	require.ErrorIs(t, err, ErrDuplicateID)
	// Replacing a message by one with the same id is not a duplicate.
	p = must(t)(s.planReplace("x", userWithID(t, "x", "X2")))
	require.Equal(t, Canceled, p.Outcome())
	n = commit(t, s, l, p)
	require.Equal(t, []string{"X"}, texts(n[0].Discarded))
	require.Equal(t, []string{"X2"}, texts(n[0].Inserted))
	require.Equal(t, []string{"X2", "B", "Y"}, texts(s.NextStep()))

	// Missing removals are reported, and nothing is planned.
	_, ok = s.planRemove("nope")
	require.False(t, ok)
	_, err = s.planReplace("nope", user(t, "n"))
	require.ErrorIs(t, err, ErrNotPending)
	p, ok = s.planRemove("b")
	require.True(t, ok)
	commit(t, s, l, p)
	_, ok = s.planRemove("b")
	require.False(t, ok, "b is no longer pending")

	// Malformed requests.
	_, err = s.planAppend("elsewhere", user(t, "u"), External)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = s.planAppend(NextTurn, messages.Message{}, External)
	require.ErrorIs(t, err, ErrInvalid)

	// The lists a log rebuilds are the live ones.
	r, err := Rebuild(l.Events().All(), 0, Config{})
	require.NoError(t, err)
	require.True(t, r.Equal(s))
}

// Scenario 40.
func TestClearsBothPendingListsAsDurableCancellations(t *testing.T) {
	s, l := newState(t, Config{}), newLog(t)
	require.Empty(t, s.planClear(), "nothing to clear")

	p1, p2, st := user(t, "p1"), user(t, "p2"), user(t, "s1")
	commit(t, s, l, must(t)(s.planAppend(NextTurn, p1, External)))
	commit(t, s, l, must(t)(s.planAppend(NextTurn, p2, External)))
	commit(t, s, l, must(t)(s.planAppend(NextStep, st, External)))

	plans := s.planClear()
	require.Len(t, plans, 2)
	n := commit(t, s, l, plans...)
	require.Zero(t, s.Len())

	es := l.EventsFrom(3)
	require.Equal(t, 2, es.Len())
	requireJSON(t, `{"target":"next-step","start":0,"removedCount":1,"inserted":[],"outcome":"canceled"}`, es.At(0).Data())
	requireJSON(t, `{"target":"next-turn","start":0,"removedCount":2,"inserted":[],"outcome":"canceled"}`, es.At(1).Data())
	require.Equal(t, []string{"s1"}, texts(n[0].Discarded))
	require.Equal(t, []string{"p1", "p2"}, texts(n[1].Discarded))
	require.Empty(t, n[0].Claimed)

	// A clear of only one list is one splice.
	commit(t, s, l, must(t)(s.planAppend(NextTurn, user(t, "p3"), External)))
	plans = s.planClear()
	require.Len(t, plans, 1)
	require.Equal(t, NextTurn, plans[0].Target())
}

func TestClaimTakesNextStepThenThePrompt(t *testing.T) {
	s, l := newState(t, Config{}), newLog(t)
	for _, m := range []struct {
		t    Target
		text string
	}{{NextTurn, "p1"}, {NextTurn, "p2"}, {NextStep, "c1"}, {NextStep, "c2"}} {
		commit(t, s, l, must(t)(s.planAppend(m.t, user(t, m.text), External)))
	}

	plans := s.planClaim(NextTurn, 4)
	require.Len(t, plans, 2)
	var claimed []messages.Message
	for _, p := range plans {
		require.True(t, p.IsClaim())
		require.Equal(t, int64(4), p.Turn())
		claimed = append(claimed, p.Removed()...)
	}
	require.Equal(t, []string{"c1", "c2", "p1"}, texts(claimed))
	n := commit(t, s, l, plans...)
	requireJSON(t, `{"target":"next-step","start":0,"removedCount":2,"inserted":[]}`, l.EventsFrom(4).At(0).Data())
	requireJSON(t, `{"target":"next-turn","start":0,"removedCount":1,"inserted":[]}`, l.EventsFrom(4).At(1).Data())
	require.Equal(t, []string{"c1", "c2"}, texts(n[0].Claimed))
	require.Equal(t, []string{"p1"}, texts(n[1].Claimed))
	require.Equal(t, int64(4), n[1].Turn)
	require.Empty(t, n[1].Discarded)
	require.Equal(t, []string{"p2"}, texts(s.NextTurn()))

	// A step-boundary claim leaves next-turn alone; empty lists give no
	// plan.
	require.Empty(t, s.planClaim(NextStep, 4))
	commit(t, s, l, must(t)(s.planAppend(NextStep, user(t, "steer"), External)))
	plans = s.planClaim(NextStep, 4)
	require.Len(t, plans, 1)
	commit(t, s, l, plans...)
	require.Equal(t, []string{"p2"}, texts(s.NextTurn()))
	require.Empty(t, s.NextStep())
}

func TestExternalInsertsAreBoundedLoopPushesAreNot(t *testing.T) {
	s, l := newState(t, Config{MaxPending: 2}), newLog(t)
	commit(t, s, l, must(t)(s.planAppend(NextTurn, user(t, "a"), External)))
	commit(t, s, l, must(t)(s.planAppend(NextStep, user(t, "b"), External)))

	_, err := s.planAppend(NextTurn, user(t, "c"), External)
	require.ErrorIs(t, err, ErrInboxFull)
	require.EqualError(t, ErrInboxFull, "inbox: full")
	_, err = s.planPrepend(NextStep, user(t, "c"), External)
	require.ErrorIs(t, err, ErrInboxFull)
	require.Equal(t, 2, s.Len(), "a refused insert changes nothing")

	// The loop's own pushes are never refused, even past the bound.
	commit(t, s, l, must(t)(s.planAppend(NextStep, pluginContext(t, "ctx1"), Loop)))
	commit(t, s, l, must(t)(s.planAppend(NextStep, pluginContext(t, "ctx2"), Loop)))
	require.Equal(t, 4, s.Len())

	// A splice that does not grow the inbox is not refused.
	commit(t, s, l, must(t)(s.planReplace(s.NextTurn()[0].ID(), user(t, "a2"))))
	p, ok, err := s.planSplice(NextStep, 0, 2, []messages.Message{user(t, "merged")}, External)
	require.NoError(t, err)
	require.True(t, ok)
	commit(t, s, l, p)
	require.Equal(t, 3, s.Len())

	// Below the bound again, external inserts are accepted.
	_, err = s.planAppend(NextTurn, user(t, "d"), External)
	require.ErrorIs(t, err, ErrInboxFull)
	for s.Len() > 1 {
		p, ok := s.planRemove(s.NextStep()[0].ID())
		require.True(t, ok)
		commit(t, s, l, p)
	}
	commit(t, s, l, must(t)(s.planAppend(NextTurn, user(t, "d"), External)))
	require.Equal(t, []string{"a2", "d"}, texts(s.NextTurn()))

	require.Error(t, Config{MaxPending: -1}.Validate())
	require.Equal(t, DefaultMaxPending, newState(t, Config{}).maxPending)
}

func TestPlansChangeNothingUntilApplied(t *testing.T) {
	s, l := newState(t, Config{}), newLog(t)
	a := user(t, "a")
	p := must(t)(s.planAppend(NextTurn, a, External))
	require.Equal(t, 1, p.RemovedCount()+len(p.Inserted()))
	require.Zero(t, s.Len(), "planning changes nothing: a failed append leaves the lists as they were")

	// Two plans made against the same state: only the first applies.
	q := must(t)(s.planAppend(NextTurn, user(t, "b"), External))
	commit(t, s, l, p)
	es := appendOK(t, l, q.Draft())
	_, err := s.apply(q, es[0])
	require.ErrorIs(t, err, ErrStalePlan)
	require.Equal(t, []string{"a"}, texts(s.NextTurn()))

	// An event that is not the plan's splice is refused.
	r := must(t)(s.planAppend(NextTurn, user(t, "c"), External))
	other := appendOK(t, l, must(t)(s.planAppend(NextStep, user(t, "c"), External)).Draft())
	_, err = s.apply(r, other[0])
	require.ErrorIs(t, err, ErrStalePlan)
	ts := appendOK(t, l, session.TurnStart{Turn: 1}.Draft())
	_, err = s.apply(r, ts[0])
	require.ErrorIs(t, err, ErrStalePlan)
	require.Equal(t, []string{"a"}, texts(s.NextTurn()))
	require.Empty(t, s.NextStep())
}

func TestInsertedNotificationsCarryTheCommittedCopies(t *testing.T) {
	s, l := newState(t, Config{}), newLog(t)
	m := user(t, "hello")
	n := commit(t, s, l, must(t)(s.planAppend(NextTurn, m, External)))
	ev, _ := l.Event(0)
	logged := ev.Payload().(session.InboxSpliced).Inserted()[0]
	require.True(t, n[0].Inserted[0].Equal(logged))
	require.Equal(t, m.ID(), n[0].Inserted[0].ID(), "ids travel unchanged")
}

// Scenario 80: an idle inject stays pending across persist and resume,
// and the resume opens no turn.
func TestPendingIdleInjectSurvivesPersistAndResume(t *testing.T) {
	s, l := newState(t, Config{}), newLog(t)
	prompt := user(t, "first")
	commit(t, s, l, must(t)(s.planAppend(NextTurn, prompt, External)))
	appendOK(t, l, session.TurnStart{Turn: 1}.Draft())
	commit(t, s, l, s.planClaim(NextTurn, 1)...)
	appendOK(t, l, session.StepStart{Turn: 1, Step: 1}.Draft())
	appendOK(t, l, session.UserMessage{Message: prompt}.Draft())
	appendOK(t, l, session.StepEnd{Turn: 1, Step: 1}.Draft())
	appendOK(t, l, session.TurnEnd{Turn: 1, Reason: session.TurnEndReason{Kind: session.EndCompleted}}.Draft())
	ctx := pluginContext(t, "idle context")
	commit(t, s, l, must(t)(s.planAppend(NextStep, ctx, External)))

	path := filepath.Join(t.TempDir(), "session.jsonl")
	require.NoError(t, session.WriteFile(path, l.Header(), l.Events().Slice(), session.WriteOptions{}))
	f, err := session.ReadFile(path)
	require.NoError(t, err)
	resumed, err := session.NewSeeded(f.Header, f.Events, testNow+100)
	require.NoError(t, err)

	r, err := Rebuild(resumed.Events().All(), f.Header.SeedLength.Or(0), Config{})
	require.NoError(t, err)
	require.True(t, r.Equal(s))
	require.Len(t, r.NextStep(), 1)
	require.True(t, r.NextStep()[0].Equal(ctx))
	require.Empty(t, r.NextTurn())
	require.Equal(t, int64(1), resumed.Turns(), "resume opens no synthetic turn")
	last, _ := resumed.Last()
	require.Equal(t, session.TypeEndSeed, last.Type())
}

func TestRebuildAfterSeedLengthIgnoresTheParentsSplices(t *testing.T) {
	s, parent := newState(t, Config{}), newLog(t)
	commit(t, s, parent, must(t)(s.planAppend(NextTurn, user(t, "parent prompt"), External)))
	commit(t, s, parent, must(t)(s.planAppend(NextStep, user(t, "parent context"), External)))

	child, err := parent.Fork("child", session.LastEvent, 2, testNow)
	require.NoError(t, err)
	seed := child.Header().SeedLength.Or(0)
	require.Equal(t, int64(2), seed)

	c, err := Rebuild(child.Events().All(), seed, Config{})
	require.NoError(t, err)
	require.Zero(t, c.Len(), "a fork starts with an empty inbox")

	// The child's own splices are replayed.
	commit(t, c, child, must(t)(c.planAppend(NextTurn, user(t, "child prompt"), External)))
	r, err := Rebuild(child.Events().All(), seed, Config{})
	require.NoError(t, err)
	require.Equal(t, []string{"child prompt"}, texts(r.NextTurn()))
	require.Empty(t, r.NextStep())

	// Replaying the seed too would resurrect the parent's inbox.
	all, err := Rebuild(parent.Events().All(), 0, Config{})
	require.NoError(t, err)
	require.True(t, all.Equal(s))
}

func TestRebuildRejectsInvalidSplices(t *testing.T) {
	for name, drafts := range map[string][]session.Draft{
		"remove from empty": {
			session.NewInboxSpliced("next-turn", 0, messages.Some(1), nil, "").Draft(),
		},
		"start past the end": {
			session.NewInboxSpliced("next-step", 1, messages.OptInt{}, []messages.Message{userWithID(t, "a", "a")}, "").Draft(),
		},
		"duplicate id across lists": {
			session.NewInboxSpliced("next-turn", 0, messages.OptInt{}, []messages.Message{userWithID(t, "a", "a")}, "").Draft(),
			session.NewInboxSpliced("next-step", 0, messages.OptInt{}, []messages.Message{userWithID(t, "a", "a")}, "").Draft(),
		},
	} {
		t.Run(name, func(t *testing.T) {
			l := newLog(t)
			for _, d := range drafts {
				appendOK(t, l, d)
			}
			_, err := Rebuild(l.Events().All(), 0, Config{})
			var se *SpliceError
			require.ErrorAs(t, err, &se)
			require.Equal(t, int64(len(drafts)-1), se.Seq)
			_, err = foldConsumedWork(l.Events().All())
			require.True(t, errors.As(err, &se))
		})
	}
}
