package persister

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/vfs"
)

// A first append that creates the directories above the root and then
// fails to sync the entry of the topmost one: the retry, which finds them
// existing, still syncs that entry, so the log survives a crash.
func TestJSONLRetriedFirstAppendSyncsTheDirectoriesItCreated(t *testing.T) {
	ctx := t.Context()
	s, m := newMemJSONL(t, JSONLConfig{})
	b := newJL(t, "above")
	b.textTurn("hello", 3)
	require.NoError(t, s.Create(b.header()))
	failed := false
	m.InjectError(func(op vfs.Op, p string) error {
		if op == vfs.OpSyncDir && p == "/" && !failed {
			failed = true
			return vfs.ErrInjected
		}
		return nil
	})
	require.ErrorIs(t, s.Append(ctx, b.id(), b.events(), Sync), vfs.ErrInjected)
	require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))
	m.InjectError(nil)
	got, err := newJSONLOn(t, m.CrashClone(), memRoot, JSONLConfig{}).Load(ctx, b.id())
	require.NoError(t, err, "the acknowledged log is lost in a crash")
	requireSameEvents(t, b.events(), got.Events)
}

// A first append that fails at any step publishes nothing; the retry
// publishes.
func TestJSONLFailedFirstAppendPublishesNothing(t *testing.T) {
	for _, step := range []vfs.Op{vfs.OpMkdir, vfs.OpOpen, vfs.OpWrite, vfs.OpSync, vfs.OpSyncDir} {
		t.Run(step.String(), func(t *testing.T) {
			ctx := t.Context()
			s, m := newMemJSONL(t, JSONLConfig{})
			b := newJL(t, "first")
			b.textTurn("hello", 3)
			require.NoError(t, s.Create(b.header()))
			path := s.locate(b.header())
			dir := filepath.Dir(path)
			m.InjectError(func(op vfs.Op, p string) error {
				if op == step && (strings.HasPrefix(p, dir) || op == vfs.OpMkdir) {
					return vfs.ErrInjected
				}
				return nil
			})
			require.ErrorIs(t, s.Append(ctx, b.id(), b.events(), Sync), vfs.ErrInjected)
			m.InjectError(nil)
			_, err := m.Stat(path)
			require.ErrorIs(t, err, fs.ErrNotExist)
			if entries, err := m.ReadDir(dir); err == nil {
				require.Empty(t, entries, "no file is left")
			}
			listed, err := s.List(ctx)
			require.NoError(t, err)
			require.Empty(t, listed)
			_, err = s.Load(ctx, b.id())
			require.ErrorIs(t, err, ErrNotFound)

			require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))
			got, err := s.Load(ctx, b.id())
			require.NoError(t, err)
			requireSameEvents(t, b.events(), got.Events)
		})
	}

	// The directory sync fails and so does unlinking the published file:
	// it is not listed, and the next operation unlinks it first.
	ctx := t.Context()
	s, m := newMemJSONL(t, JSONLConfig{})
	b := newJL(t, "orphan")
	b.textTurn("hello", 3)
	require.NoError(t, s.Create(b.header()))
	path := s.locate(b.header())
	m.InjectError(func(op vfs.Op, p string) error {
		if (op == vfs.OpSyncDir && p == filepath.Dir(path)) || (op == vfs.OpRemove && p == path) {
			return vfs.ErrInjected
		}
		return nil
	})
	require.ErrorIs(t, s.Append(ctx, b.id(), b.events(), Sync), vfs.ErrInjected)
	m.InjectError(nil)
	_, err := m.Stat(path)
	require.NoError(t, err, "the unlink failed")
	listed, err := s.List(ctx)
	require.NoError(t, err)
	require.Empty(t, listed)
	require.ErrorIs(t, s.Create(b.header()), ErrExists, "still registered")
	_, err = s.Load(ctx, b.id())
	require.ErrorIs(t, err, ErrNotFound)
	require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))
	got, err := s.Load(ctx, b.id())
	require.NoError(t, err)
	requireSameEvents(t, b.events(), got.Events)
}

// The first append is published in this order: directories made durable,
// the artifact created under its name, written (header and batch in one
// write) and fdatasynced, its directory fsynced. A crash before any of
// those operations leaves no session or the whole batch; on a file system
// that made the artifact's name durable before its data (a journal
// commits a create with any later fsync), it may leave the artifact empty
// or holding any prefix of that write. One cut inside the header is a
// torn creation: no session, and the next first append replaces it. One
// with the header whole is a stored log with a torn tail, loaded with
// the events it kept (none of them was acknowledged).
func TestJSONLPublishOrder(t *testing.T) {
	for _, enc := range crashConfigs {
		t.Run(enc.name, func(t *testing.T) { testJSONLPublishOrder(t, enc.cfg) })
	}
}

func testJSONLPublishOrder(t *testing.T, cfg JSONLConfig) {
	ctx := t.Context()
	s, m := newMemJSONL(t, cfg)
	b := newJL(t, "order")
	b.textTurn("hello", 3)
	require.NoError(t, s.Create(b.header()))
	path := s.locate(b.header())
	dir := filepath.Dir(path)

	var ops []string
	m.InjectError(func(op vfs.Op, p string) error {
		switch op {
		case vfs.OpStat, vfs.OpReadDir, vfs.OpRead:
		default:
			ops = append(ops, fmt.Sprintf("%s %s", op, strings.Replace(p, path, "<final>", 1)))
		}
		return nil
	})
	require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))
	m.InjectError(nil)
	want := []string{
		"mkdir " + dir,
		"syncdir /",                    // /data, created for the root, in /
		"syncdir /data",                // the root's entry in its parent
		"syncdir " + memRoot,           // the project directory's entry
		"syncdir " + filepath.Dir(dir), // the session directory's entry
	}
	if cfg.Lock {
		want = append(want, "lock "+filepath.Join(dir, lockName))
	}
	want = append(want, "open <final>", "write <final>", "sync <final>", "syncdir "+dir)
	require.Equal(t, want, ops)
	data := readRaw(t, m, path)
	headerLen := len(headerBytes(b.header(), cfg.Plain))

	// Crash before each of those operations (and after the last), keeping
	// the durable names only, or every name with each file cut to its
	// synced bytes and the first k of the rest: every k around the end of
	// the header and of the batch, and k in steps between.
	var cuts []int
	for k := 0; k <= len(data); k++ {
		if k <= 2 || abs(k-headerLen) <= 2 || k >= len(data)-2 || k%(len(data)/16) == 0 {
			cuts = append(cuts, k)
		}
	}
	for i := range len(ops) + 1 {
		crashes := map[string]*vfs.MemFS{"durable names": replayCrash(t, i, b, cfg, (*vfs.MemFS).CrashClone)}
		for _, k := range cuts {
			crashes[fmt.Sprintf("every name, %d bytes", k)] = replayCrash(t, i, b, cfg, func(m *vfs.MemFS) *vfs.MemFS {
				return m.CrashCloneEntries(vfs.DropUnsynced(func(int) int { return k }))
			})
		}
		for name, crashed := range crashes {
			t.Run(fmt.Sprintf("crash before op %d/%s", i, name), func(t *testing.T) {
				after := newJSONLOn(t, crashed, memRoot, cfg)
				defer after.Close()
				kept := -1 // no artifact
				if _, err := crashed.Stat(path); err == nil {
					kept = len(readRaw(t, crashed, path))
				}
				listed, err := after.List(ctx)
				require.NoError(t, err)
				got, lerr := after.Load(ctx, b.id())
				_, ierr := after.Inspect(ctx, b.id())
				if kept < headerLen {
					// Nothing, or a torn creation: no session.
					require.ErrorIs(t, lerr, ErrNotFound)
					require.ErrorIs(t, ierr, ErrNotFound)
					require.Empty(t, listed)
					require.NoError(t, after.Create(b.header()), "no session is stored")
					require.NoError(t, after.Append(ctx, b.id(), b.events(), Sync), "the first append replaces a torn creation")
					got, err := after.Load(ctx, b.id())
					require.NoError(t, err)
					requireSameEvents(t, b.events(), got.Events)
					return
				}
				require.NoError(t, lerr)
				require.NoError(t, ierr)
				require.Len(t, listed, 1)
				// A prefix of the batch, then the closers of what it kept.
				k := 0
				for k < len(got.Events) && k < len(b.events()) && b.events()[k].Equal(got.Events[k]) {
					k++
				}
				requireSameEvents(t, session.InterruptedTurnClosers(b.events()[:k]), got.Events[k:])
				if kept == len(data) {
					require.Len(t, b.events(), k)
				}
				require.ErrorIs(t, after.Create(b.header()), ErrExists)
			})
		}
	}
}

func abs(n int) int { return max(n, -n) }

// replayCrash runs the first append of b on a fresh store and returns
// what clone makes of the file system before its i-th mutating operation
// (or after the append, if it has fewer).
func replayCrash(t *testing.T, i int, b *jlBuilder, cfg JSONLConfig, clone func(*vfs.MemFS) *vfs.MemFS) *vfs.MemFS {
	t.Helper()
	return replayCrashOf(t, i, b, cfg, func(s *JSONLStore) error {
		return s.Append(t.Context(), b.id(), b.events(), Sync)
	}, clone)
}

// replayCrashOf is replayCrash of the appends play makes.
func replayCrashOf(t *testing.T, i int, b *jlBuilder, cfg JSONLConfig, play func(*JSONLStore) error, clone func(*vfs.MemFS) *vfs.MemFS) *vfs.MemFS {
	t.Helper()
	m := vfs.NewMem()
	s := newJSONLOn(t, m, memRoot, cfg)
	defer s.Close()
	require.NoError(t, s.Create(b.header()))
	var crashed *vfs.MemFS
	n := 0
	m.InjectError(func(op vfs.Op, _ string) error {
		switch op {
		case vfs.OpStat, vfs.OpReadDir, vfs.OpRead:
			return nil
		}
		if n == i {
			crashed = clone(m)
		}
		n++
		if crashed != nil {
			return vfs.ErrInjected
		}
		return nil
	})
	_ = play(s)
	m.InjectError(nil)
	if crashed == nil {
		crashed = clone(m)
	}
	return crashed
}

// The first appends of sessions in one project directory share the fsyncs
// of that directory (their session directories' entries): while one runs,
// every first append that needs one waits for the next, which then covers
// them all. Each still syncs its own session directory.
func TestJSONLFirstAppendsShareProjectDirSync(t *testing.T) {
	// Plain: a zstd coder made inside the bubble would go back to a pool
	// shared with tests outside it.
	cfg := JSONLConfig{Plain: true}
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s, m := newMemJSONL(t, cfg)
		first := newJL(t, "first")
		first.textTurn("x", 1)
		require.NoError(t, s.Create(first.header()))
		require.NoError(t, s.Append(ctx, first.id(), first.events(), Sync))
		project := filepath.Dir(filepath.Dir(s.locate(first.header())))

		const n = 6
		release := make(chan struct{})
		var mu sync.Mutex
		syncs := map[string]int{}
		m.InjectError(func(op vfs.Op, p string) error {
			if op != vfs.OpSyncDir {
				return nil
			}
			mu.Lock()
			syncs[p]++
			blocked := p == project && syncs[p] == 1
			mu.Unlock()
			if blocked {
				<-release // the first round runs until every append waits
			}
			return nil
		})
		bs := make([]*jlBuilder, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range bs {
			bs[i] = newJL(t, session.SessionID(fmt.Sprintf("s%d", i)))
			bs[i].textTurn("x", 1)
			require.NoError(t, s.Create(bs[i].header()))
			wg.Go(func() { errs[i] = s.Append(ctx, bs[i].id(), bs[i].events(), Sync) })
		}
		synctest.Wait()
		close(release)
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, 2, syncs[project], "one fsync of the project directory running, one for all who waited")
		for _, b := range bs {
			require.Equal(t, 1, syncs[filepath.Dir(s.locate(b.header()))], "each session directory synced once")
		}
		crashed := newJSONLOn(t, m.CrashClone(), memRoot, cfg)
		defer crashed.Close()
		for _, b := range bs {
			got, err := crashed.Load(ctx, b.id())
			require.NoError(t, err, "a durable first append is durable when it returns")
			requireSameEvents(t, b.events(), got.Events)
		}
	})
}

// A first append without durable creates and writes the artifact, no
// fsync: nothing of it is durable, not even its name. The session's next
// barrier fsyncs the file and then its directory. A crash anywhere before
// that barrier returns loses nothing acknowledged (there is nothing), and
// leaves no session, a torn creation or a prefix of what was written,
// under either model of what the crash keeps; once the barrier returned,
// the whole log survives.
func TestJSONLFirstAppendWithoutDurableIsSyncedByTheBarrier(t *testing.T) {
	for _, enc := range crashConfigs {
		t.Run(enc.name, func(t *testing.T) {
			ctx := t.Context()
			cfg := enc.cfg
			b := newJL(t, "lazy")
			b.textTurn("one", 3)
			k := b.len()
			b.textTurn("two", 2)
			play := func(s *JSONLStore) error {
				if err := s.Append(ctx, b.id(), b.events()[:k], NoSync); err != nil {
					return err
				}
				return s.Append(ctx, b.id(), b.from(k), Sync)
			}

			s, m := newMemJSONL(t, cfg)
			require.NoError(t, s.Create(b.header()))
			path := s.locate(b.header())
			dir := filepath.Dir(path)
			var ops []string
			m.InjectError(func(op vfs.Op, p string) error {
				switch op {
				case vfs.OpStat, vfs.OpReadDir, vfs.OpRead:
				default:
					ops = append(ops, fmt.Sprintf("%s %s", op, strings.Replace(p, path, "<final>", 1)))
				}
				return nil
			})
			require.NoError(t, s.Append(ctx, b.id(), b.events()[:k], NoSync))
			first := len(ops)
			require.NoError(t, s.Append(ctx, b.id(), b.from(k), Sync))
			m.InjectError(nil)
			require.Equal(t, []string{"open <final>", "write <final>", "syncdir " + dir}, ops[first-3:first],
				"the first append: no fsync of the file, its name made durable behind")
			require.Equal(t, []string{"write <final>", "sync <final>"}, ops[first:], "the barrier: the file alone")
			data := readRaw(t, m, path)

			for i := range len(ops) + 1 {
				crashes := map[string]*vfs.MemFS{"durable names": replayCrashOf(t, i, b, cfg, play, (*vfs.MemFS).CrashClone)}
				for _, cut := range []int{0, 1, len(data) / 3, len(data) / 2, len(data) - 1, len(data)} {
					crashes[fmt.Sprintf("every name, %d bytes", cut)] = replayCrashOf(t, i, b, cfg, play, func(m *vfs.MemFS) *vfs.MemFS {
						return m.CrashCloneEntries(vfs.DropUnsynced(func(int) int { return cut }))
					})
				}
				for name, crashed := range crashes {
					t.Run(fmt.Sprintf("crash before op %d/%s", i, name), func(t *testing.T) {
						after := newJSONLOn(t, crashed, memRoot, cfg)
						defer after.Close()
						got, err := after.Load(ctx, b.id())
						if i == len(ops) {
							require.NoError(t, err, "the barrier returned")
							requireSameEvents(t, b.events(), got.Events)
							return
						}
						if errors.Is(err, ErrNotFound) {
							require.NoError(t, after.Create(b.header()))
							require.NoError(t, play(after))
							return
						}
						require.NoError(t, err)
						n := 0
						for n < len(got.Events) && n < len(b.events()) && b.events()[n].Equal(got.Events[n]) {
							n++
						}
						requireSameEvents(t, session.InterruptedTurnClosers(b.events()[:n]), got.Events[n:])
					})
				}
			}
		})
	}
}

// A barrier that fails after a first append without durable (its fsync,
// or its directory's) removes the artifact: nothing of it was durable. The
// session is registered again, not stored, and the events are appended
// again from seq 0; if the removal fails too, nothing lists the artifact
// and the next operation removes it first.
func TestJSONLFailedBarrierAfterLazyFirstAppendUnpublishes(t *testing.T) {
	for _, step := range []vfs.Op{vfs.OpWrite, vfs.OpSync, vfs.OpSyncDir} {
		for _, removeFails := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/removeFails=%v", step, removeFails), func(t *testing.T) {
				ctx := t.Context()
				s, m := newMemJSONL(t, JSONLConfig{Lock: true})
				b := newJL(t, "lazy")
				b.textTurn("one", 3)
				k := b.len()
				b.textTurn("two", 2)
				require.NoError(t, s.Create(b.header()))
				path := s.locate(b.header())
				inject := func() {
					m.InjectError(func(op vfs.Op, p string) error {
						if (op == step && strings.HasPrefix(p, filepath.Dir(path))) || (removeFails && op == vfs.OpRemove) {
							return vfs.ErrInjected
						}
						return nil
					})
				}
				if step == vfs.OpSyncDir {
					// The first append fsyncs the directory behind: its
					// failure fails nothing, and the barrier fsyncs the
					// directory again, which fails.
					inject()
				}
				require.NoError(t, s.Append(ctx, b.id(), b.events()[:k], NoSync))
				inject()
				require.ErrorIs(t, s.Append(ctx, b.id(), b.from(k), Sync), vfs.ErrInjected)
				m.InjectError(nil)
				_, err := m.Stat(path)
				if removeFails {
					require.NoError(t, err, "the removal failed")
				} else {
					require.ErrorIs(t, err, fs.ErrNotExist, "the artifact is removed")
				}
				listed, err := s.List(ctx)
				require.NoError(t, err)
				require.Empty(t, listed)
				_, err = s.ReadFrom(ctx, b.id(), 0)
				require.ErrorIs(t, err, ErrNotFound)
				require.ErrorIs(t, s.Create(b.header()), ErrExists, "still registered")
				var fe *FenceError
				require.ErrorAs(t, s.Append(ctx, b.id(), b.from(k), Sync), &fe, "nothing is stored: the append starts at seq 0")
				require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))
				got, err := newJSONLOn(t, m.CrashClone(), memRoot, JSONLConfig{}).Load(ctx, b.id())
				require.NoError(t, err)
				requireSameEvents(t, b.events(), got.Events)
			})
		}
	}
}
