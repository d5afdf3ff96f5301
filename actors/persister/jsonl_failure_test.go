package persister

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/vfs"
)

// A failed append (write cut short, write or fsync error) leaves the file
// exactly as it was, so the retry of the same batch has no seq gap and
// stores no seq twice.
func TestJSONLFailedAppendTruncates(t *testing.T) {
	failures := map[string]func(op vfs.Op) error{
		"short write": func(op vfs.Op) error {
			if op == vfs.OpWrite {
				return &vfs.ShortWrite{N: 7}
			}
			return nil
		},
		"write error": func(op vfs.Op) error {
			if op == vfs.OpWrite {
				return vfs.ErrInjected
			}
			return nil
		},
		"fsync error": func(op vfs.Op) error {
			if op == vfs.OpSync {
				return vfs.ErrInjected
			}
			return nil
		},
	}
	for _, enc := range encodings {
		for name, fail := range failures {
			t.Run(enc.name+"/"+name, func(t *testing.T) {
				ctx := t.Context()
				s, m := newMemJSONL(t, JSONLConfig{Plain: enc.plain})
				b, k, path := twoTurnsFirstStored(t, s, "retry")
				before := readRaw(t, m, path)

				armed := true
				m.InjectError(func(op vfs.Op, p string) error {
					if armed && p == path {
						if err := fail(op); err != nil {
							armed = false // one failure: truncating back works
							return err
						}
					}
					return nil
				})
				err := s.Append(ctx, b.id(), b.from(k), Sync)
				require.ErrorIs(t, err, vfs.ErrInjected)
				m.InjectError(nil)
				require.Equal(t, before, readRaw(t, m, path), "nothing of the failed batch stays")
				require.Equal(t, before, readRaw(t, m.CrashClone(), path))

				require.NoError(t, s.Append(ctx, b.id(), b.from(k), Sync), "the retry of the same batch")
				got, err := s.Load(ctx, b.id())
				require.NoError(t, err)
				requireSameEvents(t, b.events(), got.Events)
				require.Empty(t, got.Closers)
			})
		}
	}
}

// jsonlRevision returns id's revision as List reports it.
func jsonlRevision(t testing.TB, s Store, id session.SessionID) Revision {
	t.Helper()
	listed, err := s.List(t.Context())
	require.NoError(t, err)
	for _, l := range listed {
		if l.Header.ID == id {
			return l.Revision
		}
	}
	require.FailNow(t, "not listed", "%s", id)
	return ""
}

// When truncating back fails too, the leftover bytes are removed before
// anything else reads or writes the file.
func TestJSONLFailedTruncateBackIsRepairedFirst(t *testing.T) {
	for _, next := range []string{"append", "load"} {
		t.Run(next, func(t *testing.T) {
			ctx := t.Context()
			s, m := newMemJSONL(t, JSONLConfig{})
			b, k, path := twoTurnsFirstStored(t, s, "dirty")
			before := readRaw(t, m, path)

			m.InjectError(func(op vfs.Op, p string) error {
				if p == path && (op == vfs.OpSync || op == vfs.OpTruncate) {
					return vfs.ErrInjected
				}
				return nil
			})
			require.ErrorIs(t, s.Append(ctx, b.id(), b.from(k), Sync), vfs.ErrInjected)
			m.InjectError(nil)
			require.Greater(t, len(readRaw(t, m, path)), len(before), "the batch is still there")

			switch next {
			case "append":
				require.NoError(t, s.Append(ctx, b.id(), b.from(k), Sync))
				got, err := s.Load(ctx, b.id())
				require.NoError(t, err)
				requireSameEvents(t, b.events(), got.Events)
			case "load":
				got, err := s.Load(ctx, b.id())
				require.NoError(t, err)
				requireSameEvents(t, b.events()[:k], got.Events)
				require.Equal(t, before, readRaw(t, m, path))
			}
		})
	}
}

// Release and Close are barriers: what appends without durable wrote
// survives a crash after them. Before them a crash may cut it (here: all
// of it). Both handles stay cached (an evicted handle is synced, which
// TestJSONLEvictedHandleIsSyncedFirst covers; Close syncs through the
// cached one, TestJSONLCloseSyncsThroughTheCachedHandle).
func TestJSONLReleaseAndCloseAreBarriers(t *testing.T) {
	ctx := t.Context()
	s, m := newMemJSONL(t, JSONLConfig{MaxOpenFiles: 2})
	var bs []*jlBuilder
	for _, id := range []session.SessionID{"rel", "clo"} {
		b := newJL(t, id)
		b.textTurn("one", 2)
		k := b.len()
		b.textTurn("two", 2)
		require.NoError(t, s.Create(b.header()))
		require.NoError(t, s.Append(ctx, b.id(), b.events()[:k], NoSync))
		require.NoError(t, s.Append(ctx, b.id(), b.from(k), NoSync))
		bs = append(bs, b)
	}
	dropAll := vfs.DropUnsynced(func(int) int { return 0 })
	crashed := func() *JSONLStore { return newJSONLOn(t, m.CrashCloneWith(dropAll), memRoot, JSONLConfig{}) }
	for _, b := range bs {
		_, err := crashed().Load(ctx, b.id())
		require.ErrorIs(t, err, ErrNotFound, "%s: nothing was durable, not even the file's name", b.id())
	}
	require.NoError(t, s.Release(bs[0].id()))
	got, err := crashed().Load(ctx, bs[0].id())
	require.NoError(t, err)
	requireSameEvents(t, bs[0].events(), got.Events)
	require.NoError(t, s.Close())
	got, err = crashed().Load(ctx, bs[1].id())
	require.NoError(t, err)
	requireSameEvents(t, bs[1].events(), got.Events)
}

// A handle the cache evicts to make room (MaxOpenFiles) is synced before
// it is closed: what its session wrote through it without durable survives
// a crash that drops every unsynced byte, though no barrier of that
// session ran (docs/durability.md#failures).
func TestJSONLEvictedHandleIsSyncedFirst(t *testing.T) {
	for _, enc := range encodings {
		t.Run(enc.name, func(t *testing.T) {
			ctx := t.Context()
			s, m, a, path, _ := secondTurnUnsynced(t, enc.plain)
			dropAll := vfs.DropUnsynced(func(int) int { return 0 })
			require.Less(t, len(readRaw(t, m.CrashCloneWith(dropAll), path)), len(readRaw(t, m, path)),
				"the second turn is written, not synced")

			b := newJL(t, "evicting")
			b.textTurn("one", 2)
			require.NoError(t, s.Create(b.header()))
			require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync)) // its handle evicts a's

			crashed := newJSONLOn(t, m.CrashCloneWith(dropAll), memRoot, JSONLConfig{Plain: enc.plain})
			got, err := crashed.Load(ctx, a.id())
			require.NoError(t, err)
			requireSameEvents(t, a.events(), got.Events)
		})
	}
}

// secondTurnUnsynced stores twoTurnsFirstStored's session "evicted" in a
// store that caches one handle (MaxOpenFiles 1), its second turn (from k)
// written without durable: in its cached handle, not synced.
func secondTurnUnsynced(t *testing.T, plain bool) (s *JSONLStore, m *vfs.MemFS, a *jlBuilder, path string, k int64) {
	t.Helper()
	s, m = newMemJSONL(t, JSONLConfig{Plain: plain, MaxOpenFiles: 1})
	a, k, path = twoTurnsFirstStored(t, s, "evicted")
	require.NoError(t, s.Append(t.Context(), a.id(), a.from(k), NoSync))
	return s, m, a, path, k
}

// If that sync fails, the evicted session's next barrier fails with it
// (ErrEvictedSync) instead of syncing through a new descriptor, which would
// succeed over bytes the page cache may have lost: the file is cut back to
// its last synced size, and the retry of everything after it succeeds.
func TestJSONLFailedSyncOfAnEvictedHandleFailsTheNextBarrier(t *testing.T) {
	for _, enc := range encodings {
		t.Run(enc.name, func(t *testing.T) {
			ctx := t.Context()
			s, m, a, path, k := secondTurnUnsynced(t, enc.plain)
			before := readRaw(t, m.CrashClone(), path)

			armed := true
			m.InjectError(func(op vfs.Op, p string) error {
				if armed && p == path && op == vfs.OpSync {
					armed = false
					return vfs.ErrInjected
				}
				return nil
			})
			b := newJL(t, "evicting")
			b.textTurn("one", 2)
			require.NoError(t, s.Create(b.header()))
			require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync), "the evicting session's write is not the one that failed")
			require.False(t, armed, "the evicted handle was synced")
			m.InjectError(nil)

			k2 := a.len()
			a.textTurn("three", 2)
			err := s.Append(ctx, a.id(), a.from(k2), Sync)
			require.ErrorIs(t, err, ErrEvictedSync)
			require.ErrorIs(t, err, vfs.ErrInjected)
			require.Equal(t, before, readRaw(t, m, path), "cut back to the last synced size")

			require.NoError(t, s.Append(ctx, a.id(), a.from(k), Sync), "the retry from the durable watermark")
			got, err := s.Load(ctx, a.id())
			require.NoError(t, err)
			requireSameEvents(t, a.events(), got.Events)
		})
	}
}

// A handle cached after a barrier, with nothing unsynced, is closed
// without a sync when the cache evicts it: under more sessions writing
// than MaxOpenFiles, evictions do not add an fsync to every write.
func TestJSONLEvictingASyncedHandleDoesNotSync(t *testing.T) {
	ctx := t.Context()
	s, m := newMemJSONL(t, JSONLConfig{MaxOpenFiles: 1})
	a, _, path := twoTurnsFirstStored(t, s, "evicted") // its handle cached after the barrier
	syncs := 0
	m.InjectError(func(op vfs.Op, p string) error {
		if p == path && op == vfs.OpSync {
			syncs++
		}
		return nil
	})
	b := newJL(t, "evicting")
	b.textTurn("one", 2)
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync)) // its handle evicts a's
	m.InjectError(nil)
	require.Zero(t, syncs, "%s was synced already", a.id())
	require.Equal(t, 1, m.OpenFiles(), "a's handle is closed, b's cached")
}

// Close syncs a session's unsynced bytes through its cached handle, the
// descriptor they were written through, rather than closing it first and
// syncing through a new one (see TestJSONLEvictedHandleIsSyncedFirst for
// why a closed descriptor's writeback error matters).
func TestJSONLCloseSyncsThroughTheCachedHandle(t *testing.T) {
	ctx := t.Context()
	s, m := newMemJSONL(t, JSONLConfig{})
	a, k, path := twoTurnsFirstStored(t, s, "closing")
	require.NoError(t, s.Append(ctx, a.id(), a.from(k), NoSync))
	var ops []vfs.Op
	m.InjectError(func(op vfs.Op, p string) error {
		if p == path {
			ops = append(ops, op)
		}
		return nil
	})
	require.NoError(t, s.Close())
	m.InjectError(nil)
	require.Equal(t, []vfs.Op{vfs.OpSync}, ops, "one sync, no new descriptor")
	require.Zero(t, m.OpenFiles())
	got, err := newJSONLOn(t, m.CrashCloneWith(vfs.DropUnsynced(func(int) int { return 0 })), memRoot, JSONLConfig{}).Load(ctx, a.id())
	require.NoError(t, err)
	requireSameEvents(t, a.events(), got.Events)
}

// An append still running when Close starts returns its handle after
// Close has emptied the cache. If its session has bytes unsynced, that
// handle is synced before it is closed, as an evicted one is, and a failed
// sync fails Close with ErrEvictedSync. Closing it unsynced and letting
// Close sync through a new descriptor could succeed over bytes whose
// writeback error only the closed descriptor would have been told of.
func TestJSONLHandleReturnedAfterCloseIsSyncedFirst(t *testing.T) {
	ctx := t.Context()
	s, m := newMemJSONL(t, JSONLConfig{})
	a, k, path := twoTurnsFirstStored(t, s, "closing")

	writing, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	syncs := 0
	m.InjectError(func(op vfs.Op, p string) error {
		if p != path {
			return nil
		}
		switch op {
		case vfs.OpWrite:
			once.Do(func() { close(writing); <-resume })
		case vfs.OpSync:
			mu.Lock()
			defer mu.Unlock()
			if syncs++; syncs == 1 {
				return vfs.ErrInjected
			}
		}
		return nil
	})
	appended := make(chan error, 1)
	go func() { appended <- s.Append(ctx, a.id(), a.from(k), NoSync) }()
	<-writing
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for !s.isClosed() {
		require.True(t, time.Now().Before(deadline), "Close did not start")
		runtime.Gosched()
	}
	close(resume)
	require.NoError(t, <-appended)
	err := <-closed
	m.InjectError(nil)
	require.ErrorIs(t, err, ErrEvictedSync, "the sync through the descriptor the append wrote through failed")
	require.ErrorIs(t, err, vfs.ErrInjected)
	require.Zero(t, m.OpenFiles())
}
