package persister

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
)

// fakeStore is a Writer in memory that counts calls and can fail the next
// Appends (or Releases). It checks the fence like a real store, and
// records the Releases. Safe for concurrent use.
type fakeStore struct {
	mu              sync.Mutex // guards the fields below
	logs            map[session.SessionID][]session.Event
	synced          map[session.SessionID]int // events durable, per Writer.Append
	batches         map[session.SessionID][][]int64
	syncs           int // durable calls
	released        []session.SessionID
	created         int
	calls           int
	failures        []error
	releaseFailures []error
}

func (s *fakeStore) Create(h session.Header) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.created++
	return nil
}

func (s *fakeStore) Append(ctx context.Context, id session.SessionID, events []session.Event, durable Durability) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.logs == nil {
		s.logs, s.batches, s.synced = map[session.SessionID][]session.Event{}, map[session.SessionID][][]int64{}, map[session.SessionID]int{}
	}
	if len(s.failures) > 0 {
		err := s.failures[0]
		s.failures = s.failures[1:]
		s.logs[id] = s.logs[id][:s.synced[id]] // cut back to the last barrier
		return err
	}
	if want := int64(len(s.logs[id])); len(events) > 0 && events[0].Seq() != want {
		return &FenceError{ID: id, Want: want, Got: events[0].Seq()}
	}
	s.logs[id] = append(s.logs[id], events...)
	if durable {
		s.synced[id] = len(s.logs[id])
		s.syncs++
	}
	if len(events) == 0 {
		return nil
	}
	s.batches[id] = append(s.batches[id], seqsOf(events))
	return nil
}

// seqsOf returns the seqs of evs, in order.
func seqsOf(evs []session.Event) []int64 {
	seqs := make([]int64, len(evs))
	for i, e := range evs {
		seqs[i] = e.Seq()
	}
	return seqs
}

func (s *fakeStore) Release(id session.SessionID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.releaseFailures) > 0 {
		err := s.releaseFailures[0]
		s.releaseFailures = s.releaseFailures[1:]
		return err
	}
	s.released = append(s.released, id)
	return nil
}

func (s *fakeStore) failNextRelease(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseFailures = append(s.releaseFailures, err)
}

func (s *fakeStore) releases() []session.SessionID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.released)
}

func (s *fakeStore) failNext(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, err)
}

func (s *fakeStore) creates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.created
}

func (s *fakeStore) appendCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func (s *fakeStore) batchesOf(id session.SessionID) [][]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]int64(nil), s.batches[id]...)
}

func (s *fakeStore) lastSeq(id session.SessionID) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.logs[id])) - 1
}

// heldStore is a fakeStore whose Appends wait until the test releases
// their session (or their context ends), and which tracks how many run at
// once. Safe for concurrent use.
type heldStore struct {
	fakeStore
	entered chan session.SessionID // the session of each Append that started waiting

	hmu        sync.Mutex // guards tokens, running, maxRunning
	tokens     map[session.SessionID]chan struct{}
	running    int
	maxRunning int
}

func newHeldStore() *heldStore {
	return &heldStore{entered: make(chan session.SessionID, 1024), tokens: map[session.SessionID]chan struct{}{}}
}

// tokensOf returns the channel whose tokens release id's Appends, one each.
func (s *heldStore) tokensOf(id session.SessionID) chan struct{} {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	ch := s.tokens[id]
	if ch == nil {
		ch = make(chan struct{}, 1024)
		s.tokens[id] = ch
	}
	return ch
}

func (s *heldStore) Append(ctx context.Context, id session.SessionID, events []session.Event, durable Durability) error {
	s.hmu.Lock()
	s.running++
	s.maxRunning = max(s.maxRunning, s.running)
	s.hmu.Unlock()
	defer func() {
		s.hmu.Lock()
		s.running--
		s.hmu.Unlock()
	}()
	s.entered <- id
	select {
	case <-s.tokensOf(id):
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return s.fakeStore.Append(ctx, id, events, durable)
}

// waitEntered waits for n Appends to start and returns their sessions.
func (s *heldStore) waitEntered(t *testing.T, n int) []session.SessionID {
	t.Helper()
	deadline := time.NewTimer(futureTimeout)
	defer deadline.Stop()
	var ids []session.SessionID
	for range n {
		select {
		case id := <-s.entered:
			ids = append(ids, id)
		case <-deadline.C:
			require.FailNow(t, "timed out waiting for a store call")
		}
	}
	return ids
}

// release lets one Append of id (running or future) complete.
func (s *heldStore) release(id session.SessionID) { s.tokensOf(id) <- struct{}{} }

func (s *heldStore) active() int {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	return s.running
}

func (s *heldStore) maxActive() int {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	return s.maxRunning
}
