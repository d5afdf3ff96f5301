package persister

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/vfs"
)

// Tests of writer fencing (doc.go, "Writer fencing"): two JSONLStores with
// Lock on one root stand for two processes (cluster members) sharing a
// store directory.

// lockRoots are the file systems the fencing tests run on: the OS, where
// two stores in one process exclude each other through OFD locks exactly
// as two processes do, and one MemFS shared by both stores.
var lockRoots = map[string]func(t *testing.T) (vfs.FS, string){
	"os":    func(t *testing.T) (vfs.FS, string) { return vfs.OS(), t.TempDir() },
	"memfs": func(t *testing.T) (vfs.FS, string) { return vfs.NewMem(), memRoot },
}

// newLocking returns a store with Lock over fsys at root, naming itself
// holder, closed at cleanup.
func newLocking(t testing.TB, fsys vfs.FS, root, holder string, cfg JSONLConfig) *JSONLStore {
	t.Helper()
	cfg.Lock, cfg.Holder = true, holder
	s := newJSONLOn(t, fsys, root, cfg)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// requireLockedBy checks that err refuses a write of id because holder
// holds its lock.
func requireLockedBy(t testing.TB, err error, id session.SessionID, holder string) {
	t.Helper()
	require.ErrorIs(t, err, ErrLocked)
	require.ErrorIs(t, err, ErrFenced, "a locked session is a fenced one to callers that know only ErrFenced")
	var le *LockedError
	require.ErrorAs(t, err, &le)
	require.Equal(t, id, le.ID)
	require.Equal(t, holder, le.Holder)
	require.Equal(t, lockName, filepath.Base(le.Path))
	require.True(t, strings.HasSuffix(err.Error(), fmt.Sprintf("persister: session %s is in use by %s", id, holder)),
		"the text names the session and the holder, and ends there: %q", err.Error())
}

// continueFrom returns a builder that continues a loaded log of a session
// that has had turns turns.
func continueFrom(t testing.TB, h session.Header, events []session.Event, turns int64) *jlBuilder {
	t.Helper()
	return &jlBuilder{logBuilder: &logBuilder{t: t, l: mustRestore(t, h, events), now: storeTestNow + 1_000_000}, turns: turns}
}

func TestJSONLLockExcludesAnotherWriter(t *testing.T) {
	for name, mk := range lockRoots {
		for _, enc := range encodings {
			t.Run(name+"/"+enc.name, func(t *testing.T) {
				ctx := t.Context()
				fsys, root := mk(t)
				cfg := JSONLConfig{Plain: enc.plain}
				a := newLocking(t, fsys, root, "writer a", cfg)
				b := newLocking(t, fsys, root, "writer b", cfg)
				lb := newJL(t, "shared")
				lb.textTurn("one", 3)
				k1 := lb.len()
				lb.begin("left open") // a's log ends in an open turn
				k2 := lb.len()
				require.NoError(t, a.Create(lb.header()))
				require.NoError(t, a.Append(ctx, lb.id(), lb.events()[:k1], Sync))
				path := a.locate(lb.header())
				lockPath := filepath.Join(filepath.Dir(path), lockName)
				require.Equal(t, "writer a\n", string(readRaw(t, fsys, lockPath)))

				// b may look, but not write.
				before := readRaw(t, fsys, path)
				require.ErrorIs(t, b.Create(lb.header()), ErrExists)
				requireLockedBy(t, b.Append(ctx, lb.id(), lb.events()[k1:k2], Sync), lb.id(), "writer a")
				_, err := b.Load(ctx, lb.id())
				requireLockedBy(t, err, lb.id(), "writer a")
				require.Equal(t, before, readRaw(t, fsys, path), "a refused writer changes nothing")
				in, err := b.Inspect(ctx, lb.id())
				require.NoError(t, err)
				requireSameEvents(t, lb.events()[:k1], in.Events)
				got, err := b.ReadFrom(ctx, lb.id(), 0)
				require.NoError(t, err)
				requireSameEvents(t, lb.events()[:k1], got)
				listed, err := b.List(ctx)
				require.NoError(t, err)
				require.Len(t, listed, 1)

				// a writes on, then lets go; b takes over: it loads what a
				// wrote (closing the turn a left open) and appends.
				require.NoError(t, a.Append(ctx, lb.id(), lb.events()[k1:k2], Sync))
				require.NoError(t, a.Release(lb.id()))
				require.NoError(t, a.Release(lb.id()), "Release is idempotent")
				loaded, err := b.Load(ctx, lb.id())
				require.NoError(t, err)
				require.NotEmpty(t, loaded.Closers)
				requireSameEvents(t, lb.events(), loaded.Events[:k2])
				require.Equal(t, "writer b\n", string(readRaw(t, fsys, lockPath)))
				nb := continueFrom(t, lb.header(), loaded.Events, 2)
				nb.textTurn("two", 2)
				k3 := nb.len()
				require.NoError(t, b.Append(ctx, lb.id(), nb.from(int64(len(loaded.Events))), Sync))

				// a is refused now, however stale its view.
				requireLockedBy(t, a.Append(ctx, lb.id(), lb.events()[k2:], Sync), lb.id(), "writer b")
				_, err = a.Load(ctx, lb.id())
				requireLockedBy(t, err, lb.id(), "writer b")

				// b closes (Close releases every lock); a takes the session
				// back and reads the file again rather than trusting what
				// it knew.
				require.NoError(t, b.Close())
				back, err := a.Load(ctx, lb.id())
				require.NoError(t, err)
				requireSameEvents(t, nb.events(), back.Events)
				nb.textTurn("three", 1)
				require.NoError(t, a.Append(ctx, lb.id(), nb.from(k3), Sync))
				again, err := a.Inspect(ctx, lb.id())
				require.NoError(t, err)
				requireSameEvents(t, nb.events(), again.Events)
				require.NoError(t, a.Close())
				_, err = fsys.Stat(lockPath)
				require.NoError(t, err, "a lock file is never removed")
			})
		}
	}
}

// Release of an id the store knows nothing about, or holds no lock of,
// is a no-op; after Close it is ErrClosed. Without Lock, Release only
// drops the cache.
func TestJSONLRelease(t *testing.T) {
	ctx := t.Context()
	for _, lock := range []bool{false, true} {
		t.Run(fmt.Sprintf("lock=%v", lock), func(t *testing.T) {
			s, m := newMemJSONL(t, JSONLConfig{Lock: lock})
			require.NoError(t, s.Release("unknown"))
			b := newJL(t, "rel")
			b.textTurn("one", 1)
			k1 := b.len()
			b.textTurn("two", 1)
			k2 := b.len()
			b.textTurn("three", 1)
			require.NoError(t, s.Create(b.header()))
			require.NoError(t, s.Release(b.id()), "registered, nothing written")
			require.NoError(t, s.Append(ctx, b.id(), b.events()[:k1], Sync))
			require.NoError(t, s.Append(ctx, b.id(), b.events()[k1:k2], Sync))
			open := m.OpenFiles()
			require.Equal(t, map[bool]int{false: 1, true: 2}[lock], open, "the append handle, and the lock")
			require.NoError(t, s.Release(b.id()))
			require.Zero(t, m.OpenFiles(), "Release closes the handle and the lock")
			require.NoError(t, s.Append(ctx, b.id(), b.from(k2), Sync), "a later write takes the lock again")
			require.Equal(t, open, m.OpenFiles())
			got, err := s.Load(ctx, b.id())
			require.NoError(t, err)
			requireSameEvents(t, b.events(), got.Events)
			require.NoError(t, s.Close())
			require.Zero(t, m.OpenFiles(), "Close releases every lock")
			require.ErrorIs(t, s.Release(b.id()), ErrClosed)
		})
	}
	require.NoError(t, NewMemStore().Release("x"))
	ms := NewMemStore()
	require.NoError(t, ms.Close())
	require.ErrorIs(t, ms.Release("x"), ErrClosed)
}

// A failed append that could not truncate back leaves bytes nobody
// acknowledged: Release removes them before it lets go, and keeps the
// lock when it cannot.
func TestJSONLReleaseRemovesUnacknowledgedBytes(t *testing.T) {
	ctx := t.Context()
	m := vfs.NewMem()
	a := newLocking(t, m, memRoot, "writer a", JSONLConfig{})
	b := newLocking(t, m, memRoot, "writer b", JSONLConfig{})
	lb := newJL(t, "dirty")
	lb.textTurn("one", 1)
	k := lb.len()
	lb.textTurn("two", 1)
	require.NoError(t, a.Create(lb.header()))
	require.NoError(t, a.Append(ctx, lb.id(), lb.events()[:k], Sync))
	path := a.locate(lb.header())
	size := len(readRaw(t, m, path))
	failTruncate := true
	m.InjectError(func(op vfs.Op, p string) error {
		switch {
		case p != path:
		case op == vfs.OpSync:
			return vfs.ErrInjected
		case op == vfs.OpTruncate && failTruncate:
			return vfs.ErrInjected
		}
		return nil
	})
	require.ErrorIs(t, a.Append(ctx, lb.id(), lb.from(k), Sync), vfs.ErrInjected)
	require.Greater(t, len(readRaw(t, m, path)), size, "the failed batch is still in the file")
	require.ErrorIs(t, a.Release(lb.id()), vfs.ErrInjected)
	_, err := b.Load(ctx, lb.id())
	requireLockedBy(t, err, lb.id(), "writer a")

	failTruncate = false
	m.InjectError(nil)
	require.NoError(t, a.Release(lb.id()))
	require.Len(t, readRaw(t, m, path), size)
	got, err := b.Load(ctx, lb.id())
	require.NoError(t, err)
	requireSameEvents(t, lb.events()[:k], got.Events)
}

// Two stores race to publish one new session: exactly one wins, the other
// is refused (by the lock, or by the seq check when the winner let go
// already) and the file holds the winner's log.
func TestJSONLLockFirstAppendRace(t *testing.T) {
	for name, mk := range lockRoots {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			fsys, root := mk(t)
			stores := []*JSONLStore{
				newLocking(t, fsys, root, "writer 0", JSONLConfig{}),
				newLocking(t, fsys, root, "writer 1", JSONLConfig{}),
			}
			outcomes := map[string]int{}
			for round := range 20 {
				id := session.SessionID(fmt.Sprintf("race-%02d", round))
				logs := make([]*jlBuilder, len(stores))
				for i, s := range stores {
					logs[i] = newJL(t, id)
					logs[i].textTurn(fmt.Sprintf("writer %d", i), i+1)
					require.NoError(t, s.Create(logs[i].header()))
				}
				errs := make([]error, len(stores))
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i, s := range stores {
					wg.Go(func() {
						<-start
						errs[i] = s.Append(ctx, id, logs[i].events(), Sync)
						if round%2 == 1 {
							// The winner lets go at once: the loser may then
							// take the lock and find the file.
							_ = s.Release(id)
						}
					})
				}
				close(start)
				wg.Wait()
				winner := -1
				for i, err := range errs {
					switch {
					case err == nil:
						require.Equal(t, -1, winner, "both writers won")
						winner = i
					case errors.Is(err, ErrLocked):
						outcomes["locked"]++
					default:
						var fe *FenceError
						require.ErrorAs(t, err, &fe, "writer %d", i)
						outcomes["fenced"]++
					}
				}
				require.NotEqual(t, -1, winner, "nobody won")
				for _, s := range stores {
					require.NoError(t, s.Release(id))
				}
				got, err := stores[1-winner].Load(ctx, id)
				require.NoError(t, err)
				requireSameEvents(t, logs[winner].events(), got.Events)
				require.NoError(t, stores[1-winner].Release(id))
			}
			t.Logf("losers: %v", outcomes)
		})
	}
}

// The loser of a publish race that waited for the lock while the winner
// published and let go finds the file once it holds the lock, and its
// append is fenced, not an error about an existing file.
func TestJSONLPublishRechecksUnderTheLock(t *testing.T) {
	ctx := t.Context()
	m := vfs.NewMem()
	a := newLocking(t, m, memRoot, "writer a", JSONLConfig{})
	b := newLocking(t, m, memRoot, "writer b", JSONLConfig{})
	la, lb := newJL(t, "late"), newJL(t, "late")
	la.textTurn("from a", 1)
	lb.textTurn("from b", 2)
	require.NoError(t, a.Create(la.header()))
	require.NoError(t, b.Create(lb.header()))
	// Only b's goroutine runs operations, so the flag needs no lock; the
	// injector is re-entered by a's operations.
	interleaved := false
	m.InjectError(func(op vfs.Op, _ string) error {
		if op == vfs.OpLock && !interleaved {
			// b is about to lock, having found no file: a publishes
			// and lets go first.
			interleaved = true
			require.NoError(t, a.Append(ctx, la.id(), la.events(), Sync))
			require.NoError(t, a.Release(la.id()))
		}
		return nil
	})
	err := b.Append(ctx, lb.id(), lb.events(), Sync)
	m.InjectError(nil)
	var fe *FenceError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, FenceError{ID: lb.id(), Want: la.len(), Got: 0}, *fe)
	got, err := b.Load(ctx, lb.id())
	require.NoError(t, err)
	requireSameEvents(t, la.events(), got.Events)
}

// A session directory holding only a lock file (a first append that
// failed after taking the lock) is not a session.
func TestJSONLLockFileAloneIsNoSession(t *testing.T) {
	ctx := t.Context()
	m := vfs.NewMem()
	s := newLocking(t, m, memRoot, "writer", JSONLConfig{})
	b := newJL(t, "lonely")
	b.textTurn("x", 1)
	require.NoError(t, s.Create(b.header()))
	m.InjectError(func(op vfs.Op, _ string) error {
		if op == vfs.OpWrite {
			return vfs.ErrInjected
		}
		return nil
	})
	require.ErrorIs(t, s.Append(ctx, b.id(), b.events(), Sync), vfs.ErrInjected)
	m.InjectError(nil)
	dir := filepath.Dir(s.locate(b.header()))
	entries, err := m.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, lockName, entries[0].Name())
	require.NoError(t, s.Close())

	other := newLocking(t, m, memRoot, "other", JSONLConfig{})
	listed, err := other.List(ctx)
	require.NoError(t, err)
	require.Empty(t, listed)
	_, err = other.Load(ctx, b.id())
	require.ErrorIs(t, err, ErrNotFound)
	_, err = other.Inspect(ctx, b.id())
	require.ErrorIs(t, err, ErrNotFound)
	require.NoError(t, other.Create(b.header()))
	require.NoError(t, other.Append(ctx, b.id(), b.events(), Sync))
	got, err := other.Load(ctx, b.id())
	require.NoError(t, err)
	requireSameEvents(t, b.events(), got.Events)

	// The plain store's layout check ignores the lock file as well.
	plain := newJSONLOn(t, m, memRoot+"-plain", JSONLConfig{Plain: true})
	defer plain.Close()
	writeRaw(t, m, filepath.Join(memRoot+"-plain", "--p--", "s", lockName), []byte("pid 1\n"))
	_, err = newJSONLStore(JSONLConfig{Root: memRoot + "-plain", Plain: true}, m)
	require.NoError(t, err)
	listed, err = plain.List(ctx)
	require.NoError(t, err)
	require.Empty(t, listed)
}

// Writer a is killed (kill -9) while it holds the lock and in the middle
// of an append; writer b, another process, then loads the session (the
// torn tail is repaired) and appends.
func TestJSONLKilledWriterIsTakenOver(t *testing.T) {
	for _, enc := range encodings {
		t.Run(enc.name, func(t *testing.T) {
			ctx := t.Context()
			root := t.TempDir()
			killable := vfs.Killable(vfs.OS())
			cfg := JSONLConfig{Plain: enc.plain}
			a := newLocking(t, killable, root, "writer a", cfg)
			b := newLocking(t, vfs.OS(), root, "writer b", cfg)
			lb := newJL(t, "killed")
			lb.textTurn("one", 4)
			k1 := lb.len()
			lb.textTurn("two", 4)
			k2 := lb.len()
			require.NoError(t, a.Create(lb.header()))
			require.NoError(t, a.Append(ctx, lb.id(), lb.events()[:k1], Sync))
			_, err := b.Load(ctx, lb.id())
			requireLockedBy(t, err, lb.id(), "writer a")

			// a's next batch is being written when the process dies: its
			// first bytes are in the file, not one whole record.
			path := a.locate(lb.header())
			batch := batchBytes(lb.events()[k1:k2], enc.plain, true)
			f, err := killable.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			_, err = f.Write(batch[:10])
			require.NoError(t, err)
			killable.Kill()
			require.ErrorIs(t, a.Append(ctx, lb.id(), lb.events()[k1:k2], Sync), vfs.ErrKilled)

			got, err := b.Load(ctx, lb.id())
			require.NoError(t, err)
			require.NotNil(t, got.Torn, "the half-written batch is a torn tail")
			require.Empty(t, got.Closers)
			requireSameEvents(t, lb.events()[:k1], got.Events)
			require.NoError(t, b.Append(ctx, lb.id(), lb.events()[k1:k2], Sync))
			again, err := b.Load(ctx, lb.id())
			require.NoError(t, err)
			require.Nil(t, again.Torn)
			requireSameEvents(t, lb.events(), again.Events)
			_, err = os.Stat(filepath.Join(filepath.Dir(path), lockName))
			require.NoError(t, err)
			require.ErrorIs(t, a.Close(), vfs.ErrKilled, "a dead process closes nothing")
		})
	}
}

// Directories stay 0700 and the lock file is 0600 like the log.
func TestJSONLLockFilePermissions(t *testing.T) {
	root := t.TempDir()
	s := newLocking(t, vfs.OS(), root, "w", JSONLConfig{})
	b := newJL(t, "perm")
	b.textTurn("x", 1)
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(t.Context(), b.id(), b.events(), Sync))
	fi, err := os.Stat(filepath.Join(filepath.Dir(s.locate(b.header())), lockName))
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o600), fi.Mode().Perm())
}

// The default holder names the process and the host.
func TestJSONLDefaultHolder(t *testing.T) {
	m := vfs.NewMem()
	s := newJSONLOn(t, m, memRoot, JSONLConfig{Lock: true})
	defer s.Close()
	b := newJL(t, "holder")
	b.textTurn("x", 1)
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(t.Context(), b.id(), b.events(), Sync))
	text := string(readRaw(t, m, filepath.Join(filepath.Dir(s.locate(b.header())), lockName)))
	require.Contains(t, text, fmt.Sprintf("pid %d on ", os.Getpid()))
}
