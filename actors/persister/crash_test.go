package persister

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/vfs"
)

// Crash tests of the JSONL store on MemFS (pebble's metamorphic/errorfs
// style). A workload of appends to a few sessions, some durable (a
// barrier), most not, runs against a store; the file system "crashes"
// before its k-th mutating operation, for every k: the crash clone (what
// was synced, plus a prefix of what was not: none of it, all of it, or a
// random cut; vfs.DropUnsynced; and random cuts on a file system that
// made every name durable at once, vfs.MemFS.CrashCloneEntries, where a
// first append cut short is a torn creation) is opened by a fresh store
// and every session loaded. The check: the loaded log validates, obeys the session
// trace, holds every event acknowledged durable byte for byte, holds
// nothing that was never appended and nothing after a gap, and ends with
// exactly the closers of the prefix it kept.

// crashSession is one session of a workload: its whole log, and the
// batches it is appended in, each with its durable flag (an empty batch is
// a barrier alone).
type crashSession struct {
	header  session.Header
	events  []session.Event
	batches [][]session.Event
	durable []Durability
}

// crashWorkload builds n sessions of a few turns each; about half end in
// a turn a crash left open. Batches are random cuts of the log; one in
// three is durable, as is the last, and one in four of the others is
// followed by an empty durable batch (a sync alone).
func crashWorkload(t testing.TB, rng *rand.Rand, n int) []*crashSession {
	t.Helper()
	w := make([]*crashSession, n)
	for i := range w {
		b := newJL(t, session.SessionID(fmt.Sprintf("crash-%d", i)))
		for turn := range 1 + rng.IntN(3) {
			b.textTurn(fmt.Sprintf("turn %d", turn), rng.IntN(6))
		}
		switch rng.IntN(3) {
		case 0:
			b.openToolTurn("call-open")
		case 1:
			b.begin("left open")
		}
		cs := &crashSession{header: b.header(), events: b.events()}
		for rest := cs.events; len(rest) > 0; {
			k := min(1+rng.IntN(8), len(rest))
			durable := rng.IntN(3) == 0 || k == len(rest)
			cs.batches, cs.durable, rest = append(cs.batches, rest[:k]), append(cs.durable, Durability(durable)), rest[k:]
			if !durable && rng.IntN(4) == 0 {
				cs.batches, cs.durable = append(cs.batches, nil), append(cs.durable, true)
			}
		}
		w[i] = cs
	}
	return w
}

// playCrashWorkload creates every session, then appends the batches
// round-robin. It stops at the first error and reports, per session, the
// number of events acknowledged durable (by a durable Append that returned
// nil, which covers every event before it) and the number passed to
// Append.
func playCrashWorkload(t testing.TB, s Store, w []*crashSession) (acked, attempted []int) {
	ctx := t.Context()
	acked, attempted = make([]int, len(w)), make([]int, len(w))
	for _, cs := range w {
		if err := s.Create(cs.header); err != nil {
			return acked, attempted
		}
	}
	for round := 0; ; round++ {
		progress := false
		for i, cs := range w {
			if round >= len(cs.batches) {
				continue
			}
			progress = true
			batch := cs.batches[round]
			attempted[i] += len(batch)
			if err := s.Append(ctx, cs.header.ID, batch, cs.durable[round]); err != nil {
				return acked, attempted
			}
			if cs.durable[round] {
				acked[i] = attempted[i]
			}
		}
		if !progress {
			return acked, attempted
		}
	}
}

// mutating reports whether op changes the file system.
func mutating(op vfs.Op) bool {
	switch op {
	case vfs.OpRead, vfs.OpStat, vfs.OpReadDir:
		return false
	}
	return true
}

var errCrashed = errors.New("crashed")

// crasher crashes m before its at-th mutating operation: it takes the
// crash clone then, and fails every operation after it, as a dead process
// does nothing more. keep (optional) chooses what unsynced data the clone
// keeps.
type crasher struct {
	m     *vfs.MemFS
	at    int
	keep  func(synced, current []byte) []byte
	names bool // every name survives, durable or not (CrashCloneEntries)
	n     int
	clone *vfs.MemFS
}

func (c *crasher) crashClone() *vfs.MemFS {
	if c.names {
		return c.m.CrashCloneEntries(c.keep)
	}
	return c.m.CrashCloneWith(c.keep)
}

func (c *crasher) install() {
	c.m.InjectError(func(op vfs.Op, _ string) error {
		if c.clone != nil {
			return errCrashed
		}
		if !mutating(op) {
			return nil
		}
		if c.n == c.at {
			c.clone = c.crashClone()
			return errCrashed
		}
		c.n++
		return nil
	})
}

// tornKeep returns a keep function that, for a file whose unsynced bytes
// extend its synced ones, keeps a random prefix of the extension: the OS
// wrote some of it back before the power went. One time in three the cut
// is in the last three bytes, inside the final zstd frame's checksum,
// where every record of the frame is recoverable.
func tornKeep(rng *rand.Rand) func(synced, current []byte) []byte {
	return vfs.DropUnsynced(func(n int) int {
		if rng.IntN(3) == 0 {
			return n - 1 - rng.IntN(min(3, n))
		}
		return rng.IntN(n + 1)
	})
}

// TestJSONLCrashDropsEveryUnsyncedSuffix ends a workload with appends
// that are not durable (after the last barrier of each session) and
// crashes with every possible cut of the unsynced bytes: the same number
// of them kept in every file (0, 1, 2, ... up to all of the largest), and
// random cuts chosen file by file. Every cut loads, with every event
// acknowledged durable intact and nothing after a gap.
func TestJSONLCrashDropsEveryUnsyncedSuffix(t *testing.T) {
	for _, enc := range crashConfigs {
		t.Run(enc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(len(enc.name))))
			w := crashWorkload(t, rng, 3)
			for _, cs := range w {
				// The last batches are not durable: they are what a crash
				// may cut.
				for i := len(cs.durable) - 1; i >= 0 && i >= len(cs.durable)-3; i-- {
					cs.durable[i] = false
				}
			}
			m := vfs.NewMem()
			s := newJSONLOn(t, m, memRoot, enc.cfg)
			acked, attempted := playCrashWorkload(t, s, w)
			largest, files := 0, 0
			m.CrashCloneWith(vfs.DropUnsynced(func(n int) int { largest, files = max(largest, n), files+1; return n }))
			require.Positive(t, largest, "the workload leaves unsynced bytes")
			t.Logf("%d files with unsynced bytes, the largest %d bytes unsynced", files, largest)
			for cut := 0; cut <= largest; cut++ {
				clone := m.CrashCloneWith(vfs.DropUnsynced(func(int) int { return cut }))
				ok := t.Run(fmt.Sprintf("keep=%d", cut), func(t *testing.T) {
					verifyRecovered(t, clone, enc.cfg, w, acked, attempted)
				})
				if !ok {
					return
				}
			}
			for i := range 50 {
				clone := m.CrashCloneWith(vfs.DropUnsynced(func(n int) int { return rng.IntN(n + 1) }))
				ok := t.Run(fmt.Sprintf("random=%d", i), func(t *testing.T) {
					verifyRecovered(t, clone, enc.cfg, w, acked, attempted)
				})
				if !ok {
					return
				}
			}
			// Close is a barrier: after it nothing can be cut.
			require.NoError(t, s.Close())
			for i := range acked {
				acked[i] = attempted[i]
			}
			verifyRecovered(t, m.CrashCloneWith(vfs.DropUnsynced(func(int) int { return 0 })), enc.cfg, w, acked, attempted)
		})
	}
}

// verifyRecovered opens a store over fsys and checks every session of w
// against what was acknowledged and attempted: List, then two Loads of
// each session (the second must find nothing to repair).
func verifyRecovered(t testing.TB, fsys vfs.FS, cfg JSONLConfig, w []*crashSession, acked, attempted []int) {
	t.Helper()
	ctx := t.Context()
	s := newJSONLOn(t, fsys, memRoot, cfg)
	defer s.Close()
	listed, err := s.List(ctx)
	require.NoError(t, err)
	require.LessOrEqual(t, len(listed), len(w))
	for i, cs := range w {
		got, err := s.Load(ctx, cs.header.ID)
		if errors.Is(err, ErrNotFound) {
			require.Zero(t, acked[i], "%s: acknowledged events lost with the whole file", cs.header.ID)
			continue
		}
		require.NoError(t, err, cs.header.ID)
		require.Equal(t, cs.header, got.Header)
		// The longest prefix of the workload's log; what follows it can
		// only be the closers of that prefix (committed by this Load, or
		// by an earlier one).
		k := 0
		for k < len(got.Events) && k < len(cs.events) && cs.events[k].Equal(got.Events[k]) {
			k++
		}
		require.GreaterOrEqual(t, k, acked[i], "%s: an acknowledged event is lost", cs.header.ID)
		require.LessOrEqual(t, k, attempted[i], "%s: holds events never appended", cs.header.ID)
		requireSameEvents(t, session.InterruptedTurnClosers(cs.events[:k]), got.Events[k:])
		require.LessOrEqual(t, len(got.Closers), len(got.Events)-k)
		require.NoError(t, session.CheckTrace(got.Events))

		again, err := s.Load(ctx, cs.header.ID)
		require.NoError(t, err)
		require.Nil(t, again.Torn)
		require.Empty(t, again.Closers, "the repair was committed")
		requireSameEvents(t, got.Events, again.Events)
	}
}

// crashConfigs are the store configurations of the crash test: both
// encodings, and writer locks (a crash clone holds no lock, as the process
// that held them died, so recovery takes them).
var crashConfigs = []struct {
	name string
	cfg  JSONLConfig
}{
	{"zstd", JSONLConfig{}},
	{"plain", JSONLConfig{Plain: true}},
	{"zstd-lock", JSONLConfig{Lock: true}},
}

func TestJSONLCrashAtEveryOperation(t *testing.T) {
	for _, enc := range crashConfigs {
		t.Run(enc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(42, uint64(len(enc.name))))
			w := crashWorkload(t, rng, 3)

			// A dry run counts the mutating operations.
			dry := &crasher{m: vfs.NewMem(), at: -1}
			dry.install()
			s := newJSONLOn(t, dry.m, memRoot, enc.cfg)
			acked, _ := playCrashWorkload(t, s, w)
			require.NoError(t, s.Close())
			for i, cs := range w {
				require.Len(t, cs.events, acked[i])
			}
			total := dry.n
			t.Logf("%d mutating operations", total)

			for at := 0; at <= total; at++ {
				for _, mode := range []string{"none", "all", "torn", "names"} {
					c := &crasher{m: vfs.NewMem(), at: at}
					switch mode {
					case "all":
						c.keep = vfs.DropUnsynced(func(n int) int { return n })
					case "torn":
						c.keep = tornKeep(rng)
					case "names":
						// Names durable before their data: torn creations.
						c.keep, c.names = tornKeep(rng), true
					}
					c.install()
					s := newJSONLOn(t, c.m, memRoot, enc.cfg)
					acked, attempted := playCrashWorkload(t, s, w)
					_ = s.Close()
					if c.clone == nil {
						c.clone = c.crashClone() // at == total: no crash
					}
					ok := t.Run(fmt.Sprintf("crash=%d/unsynced=%s", at, mode), func(t *testing.T) {
						// A crash during the recovery itself: at every
						// operation of a Load of every session (for one
						// model of what the first crash kept: the
						// recovery's own writes are appends and
						// truncations, which the other modes cover).
						loads := &crasher{m: c.clone.CrashClone(), at: -1}
						loads.install()
						verifyRecovered(t, loads.m, enc.cfg, w, acked, attempted)
						for j := range loads.n {
							if c.names {
								break
							}
							lc := &crasher{m: c.clone.CrashClone(), at: j}
							lc.install()
							// The operations of verifyRecovered, unchecked.
							ls := newJSONLOn(t, lc.m, memRoot, enc.cfg)
							_, _ = ls.List(t.Context())
							for _, cs := range w {
								_, _ = ls.Load(t.Context(), cs.header.ID)
								_, _ = ls.Load(t.Context(), cs.header.ID)
							}
							_ = ls.Close()
							require.NotNil(t, lc.clone, "j=%d of %d, lc.n=%d", j, loads.n, lc.n)
							verifyRecovered(t, lc.clone, enc.cfg, w, acked, attempted)
						}
						verifyRecovered(t, c.clone, enc.cfg, w, acked, attempted)
					})
					if !ok {
						return
					}
				}
			}
		})
	}
}

// Random write, sync, truncate, link, directory and read failures, with
// every failed operation retried until it succeeds, as the persister does:
// a failed append is retried from the last barrier that succeeded (the
// store cut back to it), as a durable append when the failed one was. No
// retry is ever fenced (a failed append left nothing past the barrier),
// and in the end the store holds exactly the workload, durably.
func TestJSONLRandomFailuresWithRetries(t *testing.T) {
	for _, enc := range encodings {
		for seed := range uint64(12) {
			t.Run(fmt.Sprintf("%s/seed=%d", enc.name, seed), func(t *testing.T) {
				ctx := t.Context()
				rng := rand.New(rand.NewPCG(seed, 7))
				w := crashWorkload(t, rng, 3)
				m := vfs.NewMem()
				s := newJSONLOn(t, m, memRoot, JSONLConfig{Plain: enc.plain, MaxOpenFiles: 2})
				defer s.Close()
				failures := 0
				m.InjectError(func(op vfs.Op, _ string) error {
					if rng.Float64() >= 0.12 {
						return nil
					}
					failures++
					if op == vfs.OpWrite && rng.IntN(2) == 0 {
						return &vfs.ShortWrite{N: rng.IntN(64)}
					}
					return vfs.ErrInjected
				})
				retry := func(what string, f func() error) {
					t.Helper()
					for attempt := 0; ; attempt++ {
						err := f()
						if err == nil {
							return
						}
						require.NotErrorIs(t, err, ErrFenced, "%s: a retry was fenced: the failed attempt stored something", what)
						require.NotErrorIs(t, err, ErrExists, what)
						require.ErrorIs(t, err, vfs.ErrInjected, what)
						require.Less(t, attempt, 1000, what)
					}
				}
				for _, cs := range w {
					retry("create", func() error { return s.Create(cs.header) })
				}
				acked := make([]int, len(w))   // written, durable or not
				durable := make([]int, len(w)) // written by the last barrier
				for round := 0; ; round++ {
					progress := false
					for i, cs := range w {
						if round >= len(cs.batches) {
							continue
						}
						progress = true
						end := acked[i] + len(cs.batches[round])
						sync := cs.durable[round]
						retry("append", func() error {
							start := acked[i]
							err := s.Append(ctx, cs.header.ID, cs.events[start:end], sync)
							if err != nil {
								// Cut back to the barrier: append from there.
								acked[i] = durable[i]
								return err
							}
							acked[i] = end
							if sync { // the last barrier, where a failure cuts back to
								durable[i] = end
							}
							return nil
						})
						// A look at the session between appends sees exactly
						// what was acknowledged.
						retry("inspect", func() error {
							in, err := s.Inspect(ctx, cs.header.ID)
							if err != nil {
								return err
							}
							requireSameEvents(t, cs.events[:acked[i]], in.Events[:acked[i]])
							requireSameEvents(t, session.InterruptedTurnClosers(cs.events[:acked[i]]), in.Events[acked[i]:])
							return nil
						})
					}
					if !progress {
						break
					}
				}
				m.InjectError(nil)
				require.Positive(t, failures)
				verifyRecovered(t, m.CrashClone(), JSONLConfig{Plain: enc.plain}, w, acked, acked)
				verifyRecovered(t, m, JSONLConfig{Plain: enc.plain}, w, acked, acked)
			})
		}
	}
}
