package session

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// ErrReentrantAppend is returned by an append made while the log is
// publishing a committed event to its observers: an observer may react to
// an event, never change the log underneath the other observers.
var ErrReentrantAppend = errors.New("session: append cannot reenter from an observer")

// Observer is called with every committed event, in commit order, after
// the commit point. Its error or panic is contained: it never undoes the
// append and never stops later observers; it is handed to the log's
// failure hook. An observer must not block.
type Observer func(Event) error

// ObserverFailure describes one contained observer failure.
type ObserverFailure struct {
	Seq      int64
	Observer int // registration index
	Err      error
}

type observerSet struct {
	list       []observerEntry
	next       int
	publishing bool
	onFailure  func(ObserverFailure)
}

type observerEntry struct {
	id int
	fn Observer
}

// Observe registers o and returns a function that unregisters it.
func (l *Log) Observe(o Observer) (unregister func()) {
	id := l.obs.next
	l.obs.next++
	l.obs.list = append(slices.Clip(l.obs.list), observerEntry{id: id, fn: o})
	return func() {
		l.obs.list = slices.DeleteFunc(slices.Clone(l.obs.list), func(e observerEntry) bool { return e.id == id })
	}
}

// OnObserverFailure sets the hook that receives contained observer
// failures (default: dropped after being contained).
func (l *Log) OnObserverFailure(f func(ObserverFailure)) { l.obs.onFailure = f }

// publish hands committed events to every observer. The observer list is
// snapshotted first, so an observer that (un)registers affects only later
// events.
func (l *Log) publish(events Events) {
	if len(l.obs.list) == 0 {
		return
	}
	list := l.obs.list
	l.obs.publishing = true
	defer func() { l.obs.publishing = false }()
	for e := range events.All() {
		for _, o := range list {
			if err := callObserver(o.fn, e); err != nil && l.obs.onFailure != nil {
				l.obs.onFailure(ObserverFailure{Seq: e.seq, Observer: o.id, Err: err})
			}
		}
	}
}

func callObserver(fn Observer, e Event) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("session: observer panicked: %v", r)
		}
	}()
	return fn(e)
}

// AppendBatch appends drafts atomically: either every draft is committed,
// in order, with contiguous seqs and the same time, or none is and the log
// is unchanged. Observers see the batch after the whole batch committed.
// The returned slice is owned by the caller.
func (l *Log) AppendBatch(drafts []Draft, now int64) ([]Event, error) {
	n := l.events.len()
	if err := l.appendBatch(drafts, now); err != nil {
		return nil, err
	}
	return l.EventsFrom(int64(n)).Slice(), nil
}

// appendBatch is AppendBatch without the caller's copy: the committed
// events are l.events[Len() before the call:], which the session actor
// hands out as a view.
func (l *Log) appendBatch(drafts []Draft, now int64) error {
	if l.obs.publishing {
		return ErrReentrantAppend
	}
	m := l.mark()
	for _, d := range drafts {
		e, err := l.build(d, now)
		if err == nil {
			err = l.commit(e, d.payload != nil)
		}
		if err != nil {
			l.rollback(m)
			return err
		}
	}
	// Observers only read the batch, and cannot append to the log while
	// they do (ErrReentrantAppend), so they are given the log's own
	// events, clipped.
	l.publish(l.EventsFrom(int64(m.n)))
	return nil
}

// logMark is what rollback needs to undo commits of a failed batch.
type logMark struct {
	n                       int
	nodes                   []int64
	generation              int
	lastHeader, lastContext int
	trace                   traceChecker
}

func (l *Log) mark() logMark {
	m := logMark{n: l.events.len(), nodes: l.surface.nodes, generation: l.surface.generation,
		lastHeader: l.lastHeader, lastContext: l.lastContext}
	if l.trace != nil {
		m.trace = *l.trace
		m.trace.calls = maps.Clone(l.trace.calls)
	}
	return m
}

func (l *Log) rollback(m logMark) {
	l.events.truncate(m.n)
	// Appends pushed onto the same backing array beyond len(m.nodes); a
	// replace built a new array. Either way the marked slice header is the
	// surface as it was.
	l.surface.nodes, l.surface.generation = m.nodes, m.generation
	l.lastHeader, l.lastContext = m.lastHeader, m.lastContext
	if l.trace != nil {
		*l.trace = m.trace
	}
	if l.derived.done > len(m.nodes) || l.derived.generation != m.generation {
		l.derived = deriveCache{generation: -1}
	}
}
