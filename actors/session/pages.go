package session

import (
	"iter"
	"slices"
)

// A log's events are kept in pages of pageSize events rather than in one
// growing slice: a full page is never copied or written again, so the log
// retains no growth slack beyond its last page, and growing it never
// copies what is already there. Only the first page grows as a slice does
// (a short log stays small); every later page is allocated whole.
//
// Pages are small because the first one is copied at every growth step,
// and beyond 256 elements a slice grows by a quarter at a time: a first
// page of 1,024 events would be copied about twenty times on its way
// there, which makes it the session and agent actors' largest cost per
// appended chunk (with the write barriers of a copy made during a
// collection). A page of
// 128 is copied at most eight times, and the last page's slack is at most
// 8 KiB.
const (
	pageShift = 7
	pageSize  = 1 << pageShift // 128 events, 8 KiB
	pageMask  = pageSize - 1
)

// page is a full page of events.
type page = [pageSize]Event

// eventPages is the log's store of events: full pages, then the page being
// filled. Views of it (Events) copy the two slice headers, so they are O(1)
// to make and never see a later append.
type eventPages struct {
	full []*page // every page here is full and never written again
	tail []Event // the page being filled (len < pageSize)
	// borrowed says that tail is another log's, adopted from a view of
	// it (adopt): it is copied before this log writes to it.
	borrowed bool
}

// len returns the number of events.
func (p *eventPages) len() int { return len(p.full)<<pageShift + len(p.tail) }

// at returns the event at index i (< len), in place.
func (p *eventPages) at(i int) *Event {
	if n := len(p.full) << pageShift; i >= n {
		return &p.tail[i-n]
	}
	return &p.full[i>>pageShift][i&pageMask]
}

// push stores e as the last event and returns it in place.
func (p *eventPages) push(e Event) *Event {
	if p.borrowed {
		p.own()
	}
	if p.tail == nil && len(p.full) > 0 {
		p.tail = make([]Event, 0, pageSize)
	}
	p.tail = append(p.tail, e)
	i := len(p.tail) - 1
	if len(p.tail) == pageSize {
		p.full = append(p.full, (*page)(p.tail))
		p.tail = nil
		return &p.full[len(p.full)-1][i]
	}
	return &p.tail[i]
}

// own replaces a borrowed tail with a copy of it that this log may write.
func (p *eventPages) own() {
	t := make([]Event, len(p.tail), pageSize)
	copy(t, p.tail)
	p.tail, p.borrowed = t, false
}

// adopt makes the first n+1 events of v's storage this log's events, when
// they can be: v is a view of a log's pages (its storage holds seq i at
// index i, and its tail is shorter than a page), the event of v at index
// i is at storage index n, and the storage's event n-1 is this log's last
// one (the same event, not an equal copy: its data and extension are the
// same memory). The pages are then shared, not copied: full ones are
// never written again by anyone, and the tail is borrowed (push copies it
// first). It reports whether it did.
func (p *eventPages) adopt(v Events, i, n int) bool {
	if v.start+i != n || len(v.tail) >= pageSize || len(v.full)<<pageShift+len(v.tail) <= n {
		return false
	}
	if n > 0 {
		mine, theirs := p.at(n-1), v.storageAt(n-1)
		if mine.seq != theirs.seq || mine.ext != theirs.ext || mine.typ != theirs.typ || mine.flags != theirs.flags ||
			mine.data != theirs.data {
			return false
		}
	}
	k, rem := (n+1)>>pageShift, (n+1)&pageMask
	full := v.full[:k:k]
	var tail []Event
	switch {
	case rem == 0:
	case k < len(v.full):
		tail = v.full[k][:rem:rem]
	default:
		tail = v.tail[:rem:rem]
	}
	p.full, p.tail, p.borrowed = full, tail, tail != nil
	return true
}

// pagesOver returns the pages of es, taking its array over: each full
// page is a run of pageSize events of the array, in place; the events
// after the last one (fewer than a page) are copied into a tail of their
// own, which appends fill, and cleared in the array, which keeps no
// reference past its pages.
func pagesOver(es []Event) eventPages {
	var p eventPages
	n := len(es) >> pageShift << pageShift
	if n > 0 {
		p.full = make([]*page, 0, n>>pageShift)
		for i := 0; i < n; i += pageSize {
			p.full = append(p.full, (*page)(es[i:i+pageSize]))
		}
	}
	if rest := es[n:]; len(rest) > 0 {
		p.tail = make([]Event, len(rest), pageSize)
		copy(p.tail, rest)
		clear(rest)
	}
	return p
}

// truncate drops every event from index n on (a rolled-back batch, which
// no view has seen).
func (p *eventPages) truncate(n int) {
	if p.borrowed {
		p.own()
	}
	for p.len() > n {
		if len(p.tail) == 0 {
			// A copy: the page may be another log's too (adopt).
			last := p.full[len(p.full)-1]
			p.full = p.full[:len(p.full)-1]
			p.tail = slices.Clone(last[:])
		}
		k := max(n-len(p.full)<<pageShift, 0)
		clear(p.tail[k:]) // drop references held past the new length
		p.tail = p.tail[:k]
	}
}

// view returns the events [i, j) as a view.
func (p *eventPages) view(i, j int) Events {
	nf := len(p.full)
	return Events{full: p.full[:nf:nf], tail: slices.Clip(p.tail), start: i, n: j - i}
}

// Events is an immutable view of a run of events. Safe for concurrent use.
type Events struct {
	// The view is the events [start, start+n) of full pages then a tail
	// (of any length), both clipped and never written through.
	full     []*page
	tail     []Event
	start, n int
}

// eventsOver returns a view of es, not copied: the caller must not modify
// es while the view is used.
func eventsOver(es []Event) Events { return Events{tail: slices.Clip(es), n: len(es)} }

// EventsOf returns a view over a copy of es.
func EventsOf(es []Event) Events { return eventsOver(slices.Clone(es)) }

// Len returns the number of events.
func (v Events) Len() int { return v.n }

// at returns event i of the view, in place.
func (v Events) at(i int) *Event {
	if uint(i) >= uint(v.n) {
		panic("session: Events index out of range")
	}
	return v.storageAt(v.start + i)
}

// storageAt returns the event at index g of the view's storage (the
// events its pages hold, from the first), in place.
func (v Events) storageAt(g int) *Event {
	if n := len(v.full) << pageShift; g >= n {
		return &v.tail[g-n]
	}
	return &v.full[g>>pageShift][g&pageMask]
}

// At returns event i of the view (not seq i, unless the view starts at 0).
func (v Events) At(i int) Event { return *v.at(i) }

// All iterates the events in order.
func (v Events) All() iter.Seq[Event] {
	return func(yield func(Event) bool) {
		for i := range v.n {
			if !yield(*v.at(i)) {
				return
			}
		}
	}
}

// View returns the events i to j (exclusive) of the view, as a view:
// nothing is copied.
func (v Events) View(i, j int) Events {
	if i < 0 || j < i || j > v.n {
		panic("session: Events view out of range")
	}
	return Events{full: v.full, tail: v.tail, start: v.start + i, n: j - i}
}

// Slice returns a copy of the events, owned by the caller.
func (v Events) Slice() []Event {
	out := make([]Event, 0, v.n)
	for i := range v.n {
		out = append(out, *v.at(i))
	}
	return out
}
