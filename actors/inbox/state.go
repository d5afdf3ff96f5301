package inbox

import (
	"errors"
	"fmt"
	"iter"
	"slices"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/invariants"
	"github.com/dshgo/dsh/messages"
)

// Target names one of the two pending lists
// (docs/agent-loop.md#the-inbox).
type Target string

// The two pending lists: next-turn holds prompts, one claimed per turn;
// next-step holds steering and injected context, claimed whole at every
// step boundary.
const (
	NextTurn Target = "next-turn"
	NextStep Target = "next-step"
)

// Valid reports whether t names one of the two lists.
func (t Target) Valid() bool { return t == NextTurn || t == NextStep }

func (t Target) index() int {
	if t == NextStep {
		return 1
	}
	return 0
}

// Origin says who inserts a message. It decides whether the bound applies:
// an external caller is refused with ErrInboxFull when the inbox is full,
// the loop itself (a tool's additional contexts) never is, because refusing
// it would lose work the model already did.
type Origin uint8

// The origins. The zero value is External, so a caller that forgets to say
// is bounded.
const (
	External Origin = iota
	Loop
)

// Outcome marks a splice that cancelled pending input.
type Outcome string

// Canceled is the outcome of a user-level removal (splice, remove, replace,
// clear) that deleted something. Claims carry no outcome.
const Canceled Outcome = "canceled"

// DefaultMaxPending is the bound on pending messages when Config.MaxPending
// is zero.
const DefaultMaxPending = 1024

// Errors of the inbox core. Callers branch on them with errors.Is; the
// returned errors wrap them with the message id.
var (
	// ErrInboxFull refuses an external insert that would take the inbox past
	// its bound. Nothing was changed.
	ErrInboxFull = errors.New("inbox: full")
	// ErrDuplicateID refuses an insert whose message id is already pending
	// (in either list) or repeated within the insert.
	ErrDuplicateID = errors.New("inbox: duplicate message id")
	// ErrNotPending reports a replace of an id that is not pending.
	ErrNotPending = errors.New("inbox: message not pending")
	// ErrInvalid refuses a malformed request: an unknown target, a zero or
	// non-user message.
	ErrInvalid = errors.New("inbox: invalid request")
	// ErrStalePlan refuses to apply a plan that was not made against the
	// current state, or an event that is not the plan's splice. It is a
	// broken invariant of the caller, never an expected failure.
	ErrStalePlan = errors.New("inbox: stale plan")
)

// SpliceError reports an agent/inbox/spliced event that does not apply to
// the lists rebuilt so far: its seq and why. The log it came from is not a
// log this inbox could have written.
type SpliceError struct {
	Seq int64
	Err error
}

func (e *SpliceError) Error() string {
	return fmt.Sprintf("inbox: splice at seq %d does not apply: %v", e.Seq, e.Err)
}

func (e *SpliceError) Unwrap() error { return e.Err }

// Config configures the inbox core. The zero value is usable.
type Config struct {
	// MaxPending bounds the number of messages pending in both lists
	// together, against external inserts (Origin External): an insert that
	// would take the total past it is refused with ErrInboxFull. The loop's
	// own inserts are not refused, so the total can exceed the bound; a
	// rebuilt inbox is never refused either (the log is the truth).
	// Default (0): DefaultMaxPending.
	MaxPending int
}

// Validate reports a negative bound.
func (c Config) Validate() error {
	if c.MaxPending < 0 {
		return fmt.Errorf("inbox: MaxPending %d is negative", c.MaxPending)
	}
	return nil
}

func (c Config) maxPending() int {
	if c.MaxPending == 0 {
		return DefaultMaxPending
	}
	return c.MaxPending
}

// State is the pure inbox core: the two ordered pending lists. It has no
// goroutines, clock, I/O or actor import.
//
// Every change is a normalised splice, and durability comes first: a plan*
// method validates a change against the current lists and returns a splicePlan
// (whose Draft is the agent/inbox/spliced event to append) without changing
// anything; apply changes the lists only once that event is committed,
// using the event's copies of the inserted messages. Plans returned
// together (planClear, planClaim) are applied in order; each is made
// against the state the previous ones produce, so a plan applies only to
// the exact state it expects (else ErrStalePlan).
//
// A State is not safe for concurrent use: the inbox actor owns it. What it
// returns (plans, message slices, notices) is owned by the caller.
type State struct {
	maxPending int
	lists      [2][]messages.Message         // indexed by Target.index
	where      map[messages.MessageID]Target // every pending id and its list
	version    uint64                        // bumped by every applied splice
}

// newEmptyState returns an empty inbox.
func newEmptyState(cfg Config) (*State, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return emptyState(cfg), nil
}

// emptyState returns an empty inbox for a validated cfg.
func emptyState(cfg Config) *State {
	return &State{maxPending: cfg.maxPending(), where: make(map[messages.MessageID]Target)}
}

// Rebuild returns the inbox a log describes: it replays, in order, every
// agent/inbox/spliced event whose seq is at least seedLength (the header's
// seedLength; 0 for a session that was not forked). A fork therefore does
// not inherit its parent's pending inbox, while a resumed session gets its
// own back. A splice that does not apply (start or removedCount out of
// range, a duplicate id) is a *SpliceError: such a log was not written by
// an inbox. Other events are skipped.
func Rebuild(events iter.Seq[session.Event], seedLength int64, cfg Config) (*State, error) {
	s, err := newEmptyState(cfg)
	if err != nil {
		return nil, err
	}
	for e := range events {
		if e.Seq() < seedLength || e.Type() != session.TypeInboxSpliced {
			continue
		}
		if _, err := s.replay(e); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// replay applies a committed splice event and returns the messages it
// deleted.
func (s *State) replay(e session.Event) ([]messages.Message, error) {
	p, ok := e.Payload().(session.InboxSpliced)
	if !ok {
		return nil, &SpliceError{Seq: e.Seq(), Err: fmt.Errorf("event %s is not a splice", e.Type())}
	}
	t := Target(p.Target)
	if !t.Valid() {
		return nil, &SpliceError{Seq: e.Seq(), Err: fmt.Errorf("unknown target %q", p.Target)}
	}
	n := int64(len(s.lists[t.index()]))
	removed := p.RemovedCount.Or(0)
	if p.Start < 0 || p.Start > n || removed < 0 || removed > n-p.Start {
		return nil, &SpliceError{Seq: e.Seq(), Err: fmt.Errorf("start %d removing %d is outside %s of length %d", p.Start, removed, t, n)}
	}
	inserted := p.Inserted()
	if err := s.checkIDs(t, int(p.Start), int(removed), inserted); err != nil {
		return nil, &SpliceError{Seq: e.Seq(), Err: err}
	}
	return s.splice(t, int(p.Start), int(removed), inserted), nil
}

// NextTurn returns a copy of the next-turn list, owned by the caller.
func (s *State) NextTurn() []messages.Message { return slices.Clone(s.lists[0]) }

// NextStep returns a copy of the next-step list, owned by the caller.
func (s *State) NextStep() []messages.Message { return slices.Clone(s.lists[1]) }

// List returns a copy of list t, owned by the caller (nil for an unknown
// target).
func (s *State) List(t Target) []messages.Message {
	if !t.Valid() {
		return nil
	}
	return slices.Clone(s.lists[t.index()])
}

// Len returns the number of pending messages in both lists.
func (s *State) Len() int { return len(s.lists[0]) + len(s.lists[1]) }

// Lookup returns the list and position of a pending id.
func (s *State) Lookup(id messages.MessageID) (Target, int, bool) {
	t, ok := s.where[id]
	if !ok {
		return "", 0, false
	}
	return t, slices.IndexFunc(s.lists[t.index()], func(m messages.Message) bool { return m.ID() == id }), true
}

// Equal reports whether two inboxes hold the same messages (JSON-equal) in
// the same order. Bounds and versions are not compared.
func (s *State) Equal(o *State) bool {
	for i := range s.lists {
		if !slices.EqualFunc(s.lists[i], o.lists[i], messages.Message.Equal) {
			return false
		}
	}
	return true
}

// planKind separates user-level changes (notified as inserted/discarded)
// from claims (notified as claimed).
type planKind uint8

const (
	kindUser planKind = iota
	kindClaim
)

// splicePlan is one validated, normalised splice not yet applied: the change and
// the agent/inbox/spliced event that records it. It is a frozen value,
// read through getters. Build plans with the State's plan* methods.
type splicePlan struct {
	kind     planKind
	target   Target
	start    int
	removed  []messages.Message // the pending messages the splice deletes
	inserted []messages.Message
	outcome  Outcome
	turn     int64  // claims: the claiming turn
	version  uint64 // the State version the plan applies to
}

// Target returns the list the splice changes.
func (p splicePlan) Target() Target { return p.target }

// Start returns the normalised start (0 ≤ start ≤ length of the list).
func (p splicePlan) Start() int64 { return int64(p.start) }

// RemovedCount returns the number of messages the splice deletes.
func (p splicePlan) RemovedCount() int { return len(p.removed) }

// Removed returns a copy of the messages the splice deletes, as they are
// pending now; owned by the caller.
func (p splicePlan) Removed() []messages.Message { return slices.Clone(p.removed) }

// Inserted returns a copy of the messages the splice inserts; owned by the
// caller.
func (p splicePlan) Inserted() []messages.Message { return slices.Clone(p.inserted) }

// Outcome returns Canceled for a user-level removal that deletes
// something, "" otherwise.
func (p splicePlan) Outcome() Outcome { return p.outcome }

// IsClaim reports whether the plan is a claim (notified as claimed, not
// as inserted or discarded).
func (p splicePlan) IsClaim() bool { return p.kind == kindClaim }

// Turn returns the claiming turn of a claim (0 otherwise).
func (p splicePlan) Turn() int64 { return p.turn }

// Payload returns the agent/inbox/spliced payload recording the splice:
// removedCount is present only when the splice deletes something, outcome
// only when it is Canceled, which is the exact shape the reference writes
// (an insert is {target, start, inserted}, a claim {target, start,
// removedCount, inserted: []}).
func (p splicePlan) Payload() session.InboxSpliced {
	var removed messages.OptInt
	if len(p.removed) > 0 {
		removed = messages.Some(int64(len(p.removed)))
	}
	return session.NewInboxSpliced(string(p.target), int64(p.start), removed, p.inserted, string(p.outcome))
}

// Draft returns the event draft to append before apply.
func (p splicePlan) Draft() session.Draft { return p.Payload().Draft() }

// planDrafts returns the drafts of plans, in order, for one atomic append.
func planDrafts(plans []splicePlan) []session.Draft {
	ds := make([]session.Draft, len(plans))
	for i, p := range plans {
		ds[i] = p.Draft()
	}
	return ds
}

// clampStart normalises a splice start the JavaScript way: a negative start
// counts from the end, and the result is clamped to [0, n].
func clampStart(start int64, n int) int {
	if start < 0 {
		return int(max(int64(n)+start, 0))
	}
	return int(min(start, int64(n)))
}

// clampCount normalises a delete count the JavaScript way: clamped to
// [0, n-start].
func clampCount(count int64, n, start int) int {
	return int(min(max(count, 0), int64(n-start)))
}

// planSplice plans the user-level splice of list t: delete deleteCount
// messages from start, insert inserted there. start and deleteCount are
// normalised the JavaScript way (negative start counts from the end; both
// are clamped to the list). A splice that deletes and inserts nothing is a
// no-op: ok is false and there is nothing to append. A splice that deletes
// something carries the outcome Canceled.
//
// Errors: ErrInvalid (unknown target, a zero or non-user message),
// ErrDuplicateID (an inserted id is pending outside the deleted range, or
// repeated), ErrInboxFull (origin External, and the splice grows the inbox
// past its bound). inserted is copied.
func (s *State) planSplice(t Target, start, deleteCount int64, inserted []messages.Message, o Origin) (p splicePlan, ok bool, err error) {
	if !t.Valid() {
		return splicePlan{}, false, fmt.Errorf("%w: unknown target %q", ErrInvalid, t)
	}
	n := len(s.lists[t.index()])
	st := clampStart(start, n)
	del := clampCount(deleteCount, n, st)
	if del == 0 && len(inserted) == 0 {
		return splicePlan{}, false, nil
	}
	if err := s.checkInsert(t, st, del, inserted, o); err != nil {
		return splicePlan{}, false, err
	}
	var outcome Outcome
	if del > 0 {
		outcome = Canceled
	}
	return s.plan(kindUser, t, st, del, inserted, outcome, 0), true, nil
}

// planAppend plans inserting m at the end of list t. Errors as planSplice.
func (s *State) planAppend(t Target, m messages.Message, o Origin) (splicePlan, error) {
	if !t.Valid() {
		return splicePlan{}, fmt.Errorf("%w: unknown target %q", ErrInvalid, t)
	}
	p, _, err := s.planSplice(t, int64(len(s.lists[t.index()])), 0, []messages.Message{m}, o)
	return p, err
}

// planPrepend plans inserting m at the front of list t. Errors as
// planSplice.
func (s *State) planPrepend(t Target, m messages.Message, o Origin) (splicePlan, error) {
	p, _, err := s.planSplice(t, 0, 0, []messages.Message{m}, o)
	return p, err
}

// planReplace plans replacing the pending message id, in place, by m (whose
// id may differ). The plan carries the outcome Canceled. It never grows the
// inbox, so the bound does not apply. Errors: ErrNotPending, ErrInvalid,
// ErrDuplicateID (m's id is pending as another message).
func (s *State) planReplace(id messages.MessageID, m messages.Message) (splicePlan, error) {
	t, i, ok := s.Lookup(id)
	if !ok {
		return splicePlan{}, fmt.Errorf("%w: %s", ErrNotPending, id)
	}
	// One for one: the splice does not grow the inbox, so even an external
	// replace of a full inbox is not refused.
	p, _, err := s.planSplice(t, int64(i), 1, []messages.Message{m}, External)
	return p, err
}

// planRemove plans deleting the pending message id, with the outcome
// Canceled. ok is false when id is not pending (nothing to append).
func (s *State) planRemove(id messages.MessageID) (p splicePlan, ok bool) {
	t, i, ok := s.Lookup(id)
	if !ok {
		return splicePlan{}, false
	}
	return s.plan(kindUser, t, i, 1, nil, Canceled, 0), true
}

// planClear plans cancelling everything pending: one splice emptying
// next-step, then one emptying next-turn, each with the outcome Canceled
// and only when the list is not empty. Append the plans together, in
// order; apply them in the same order.
func (s *State) planClear() []splicePlan {
	var plans []splicePlan
	v := s.version
	for _, t := range [...]Target{NextStep, NextTurn} {
		if n := len(s.lists[t.index()]); n > 0 {
			p := s.plan(kindUser, t, 0, n, nil, Canceled, 0)
			p.version = v
			v++
			plans = append(plans, p)
		}
	}
	return plans
}

// planClaim plans the claim of a turn's input
// (docs/agent-loop.md#the-inbox): one splice
// deleting all of next-step and, when target is NextTurn, one deleting the
// first next-turn message (the turn's prompt). Claims are plain deletions
// with no outcome. The claimed batch is the plans' Removed in order:
// next-step messages first, then the prompt. Empty lists give no plan; an
// unknown target claims like NextStep. Append the plans together, in
// order; apply them in the same order.
func (s *State) planClaim(target Target, turn int64) []splicePlan {
	var plans []splicePlan
	v := s.version
	if n := len(s.lists[NextStep.index()]); n > 0 {
		p := s.plan(kindClaim, NextStep, 0, n, nil, "", turn)
		p.version = v
		v++
		plans = append(plans, p)
	}
	if target == NextTurn && len(s.lists[NextTurn.index()]) > 0 {
		p := s.plan(kindClaim, NextTurn, 0, 1, nil, "", turn)
		p.version = v
		plans = append(plans, p)
	}
	return plans
}

// plan builds a plan against the current version.
func (s *State) plan(kind planKind, t Target, start, del int, inserted []messages.Message, outcome Outcome, turn int64) splicePlan {
	return splicePlan{
		kind:     kind,
		target:   t,
		start:    start,
		removed:  slices.Clone(s.lists[t.index()][start : start+del]),
		inserted: slices.Clone(inserted),
		outcome:  outcome,
		turn:     turn,
		version:  s.version,
	}
}

// checkInsert validates inserting ins at start of list t in place of del
// messages: well-formed user messages, unique ids, and the bound.
func (s *State) checkInsert(t Target, start, del int, ins []messages.Message, o Origin) error {
	for _, m := range ins {
		if m.IsZero() {
			return fmt.Errorf("%w: zero message", ErrInvalid)
		}
		if m.Role() != messages.RoleUser {
			return fmt.Errorf("%w: message %s has role %s, want user", ErrInvalid, m.ID(), m.Role())
		}
	}
	if err := s.checkIDs(t, start, del, ins); err != nil {
		return err
	}
	if grow := len(ins) - del; o == External && grow > 0 && s.Len()+grow > s.maxPending {
		return fmt.Errorf("%w: %d pending, bound %d", ErrInboxFull, s.Len(), s.maxPending)
	}
	return nil
}

// checkIDs reports an inserted id that is repeated, or pending anywhere but
// in the deleted range [start, start+del) of list t (an id may be replaced
// by a message with the same id).
func (s *State) checkIDs(t Target, start, del int, ins []messages.Message) error {
	if len(ins) == 0 {
		return nil
	}
	deleted := s.lists[t.index()][start : start+del]
	seen := make(map[messages.MessageID]bool, len(ins))
	for _, m := range ins {
		id := m.ID()
		if seen[id] {
			return fmt.Errorf("%w: %s is inserted twice", ErrDuplicateID, id)
		}
		seen[id] = true
		if _, pending := s.where[id]; pending &&
			!slices.ContainsFunc(deleted, func(d messages.Message) bool { return d.ID() == id }) {
			return fmt.Errorf("%w: %s is already pending", ErrDuplicateID, id)
		}
	}
	return nil
}

// spliceNotices are what applying a splice tells the world
// (docs/agent-loop.md#the-inbox):
// the inserted messages (the committed event's copies), the messages a
// user-level removal discarded, or the messages a claim took, with its
// turn. The slices are owned by the caller.
type spliceNotices struct {
	Target    Target
	Inserted  []messages.Message
	Discarded []messages.Message
	Claimed   []messages.Message
	Turn      int64
}

// apply applies p now that its event is committed: committed must be the
// agent/inbox/spliced event appended from p.Draft(), and p must have been
// planned against the current state (plans returned together are applied
// in order). Otherwise nothing changes and the error wraps ErrStalePlan:
// the caller broke the protocol, the lists and the log disagree, and the
// state should be rebuilt from the log.
func (s *State) apply(p splicePlan, committed session.Event) (spliceNotices, error) {
	if p.version != s.version {
		return spliceNotices{}, fmt.Errorf("%w: planned at version %d, state is at %d", ErrStalePlan, p.version, s.version)
	}
	ev, ok := committed.Payload().(session.InboxSpliced)
	if !ok {
		return spliceNotices{}, fmt.Errorf("%w: event %d is %s, not a splice", ErrStalePlan, committed.Seq(), committed.Type())
	}
	inserted := ev.Inserted()
	if Target(ev.Target) != p.target || ev.Start != int64(p.start) || ev.RemovedCount.Or(0) != int64(len(p.removed)) ||
		Outcome(ev.Outcome) != p.outcome || !slices.EqualFunc(inserted, p.inserted, messages.Message.Equal) {
		return spliceNotices{}, fmt.Errorf("%w: event %d is not the planned splice", ErrStalePlan, committed.Seq())
	}
	removed := s.splice(p.target, p.start, len(p.removed), inserted)
	n := spliceNotices{Target: p.target}
	if p.kind == kindClaim {
		n.Claimed, n.Turn = removed, p.turn
	} else {
		n.Inserted, n.Discarded = inserted, removed
	}
	return n, nil
}

// splice changes list t, which the caller validated, and returns the
// deleted messages.
func (s *State) splice(t Target, start, del int, ins []messages.Message) []messages.Message {
	l := &s.lists[t.index()]
	removed := slices.Clone((*l)[start : start+del])
	for _, m := range removed {
		delete(s.where, m.ID())
	}
	// Replace in place: nothing the state handed out aliases the lists
	// (getters copy), so the backing array is ours to reuse.
	*l = slices.Replace(*l, start, start+del, ins...)
	for _, m := range ins {
		s.where[m.ID()] = t
	}
	s.version++
	if invariants.Enabled {
		s.checkIndex()
	}
	return removed
}

// checkIndex asserts that the id index matches the lists.
func (s *State) checkIndex() {
	n := 0
	for i, l := range s.lists {
		for _, m := range l {
			n++
			t, ok := s.where[m.ID()]
			_ = invariants.Assertf(ok && t.index() == i, "inbox: id %s indexed in %q, pending in list %d", m.ID(), t, i)
		}
	}
	_ = invariants.Assertf(n == len(s.where), "inbox: %d ids indexed, %d pending", len(s.where), n)
}
