package persister

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/fixtures"
	"github.com/dshgo/dsh/internal/vfs"
	"github.com/dshgo/dsh/messages"
)

// The JSONL store runs the shared conformance suite in both encodings, on
// the real file system and on MemFS, once with a handle cache of one so
// that every append to another session evicts, and with writer locks.
func init() {
	storeFactories["jsonl-zstd-lock"] = func(t *testing.T) Store {
		return newJSONLOn(t, vfs.OS(), t.TempDir(), JSONLConfig{Lock: true})
	}
	storeFactories["jsonl-plain-memfs-lock"] = func(t *testing.T) Store {
		return newJSONLOn(t, vfs.NewMem(), memRoot, JSONLConfig{Plain: true, Lock: true, MaxOpenFiles: 1})
	}
	storeFactories["jsonl-zstd"] = func(t *testing.T) Store {
		return newJSONLOn(t, vfs.OS(), t.TempDir(), JSONLConfig{})
	}
	storeFactories["jsonl-plain"] = func(t *testing.T) Store {
		return newJSONLOn(t, vfs.OS(), t.TempDir(), JSONLConfig{Plain: true})
	}
	storeFactories["jsonl-zstd-memfs"] = func(t *testing.T) Store {
		return newJSONLOn(t, vfs.NewMem(), memRoot, JSONLConfig{})
	}
	storeFactories["jsonl-plain-memfs-maxopen1"] = func(t *testing.T) Store {
		return newJSONLOn(t, vfs.NewMem(), memRoot, JSONLConfig{Plain: true, MaxOpenFiles: 1})
	}
}

// memRoot is the store root on MemFS; its parent exists, it does not.
const memRoot = "/data/sessions"

func newJSONLOn(t testing.TB, fsys vfs.FS, root string, cfg JSONLConfig) *JSONLStore {
	t.Helper()
	cfg.Root = root
	s, err := newJSONLStore(cfg, fsys)
	require.NoError(t, err)
	return s
}

// newMemJSONL returns a store on a fresh MemFS, closed at cleanup.
func newMemJSONL(t testing.TB, cfg JSONLConfig) (*JSONLStore, *vfs.MemFS) {
	t.Helper()
	m := vfs.NewMem()
	s := newJSONLOn(t, m, memRoot, cfg)
	t.Cleanup(func() { _ = s.Close() })
	return s, m
}

// encodings are the two artifact encodings, by name.
var encodings = []struct {
	name  string
	plain bool
}{{"zstd", false}, {"plain", true}}

// ---- a log builder for these tests ----

// jlBuilder is a logBuilder with the turns these tests write: text turns
// streamed in deltas, and a tool turn a crash left open.
type jlBuilder struct {
	*logBuilder
	turns int64
}

func jlHeader(id session.SessionID) session.Header {
	return session.Header{ID: id, CreatedAt: storeTestNow, Cwd: "/work/proj"}
}

func newJL(t testing.TB, id session.SessionID) *jlBuilder {
	t.Helper()
	l, err := session.New(jlHeader(id))
	require.NoError(t, err)
	return &jlBuilder{logBuilder: &logBuilder{t: t, l: l, now: storeTestNow}}
}

// twoTurnsFirstStored builds a log of two five-chunk text turns with id and
// stores the first turn in s, durably: b.from(k) is the second, which the
// test then writes, fails or damages. path is the session's log file.
func twoTurnsFirstStored(t testing.TB, s *JSONLStore, id session.SessionID) (b *jlBuilder, k int64, path string) {
	t.Helper()
	b = newJL(t, id)
	b.textTurn("one", 5)
	k = b.len()
	b.textTurn("two", 5)
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(t.Context(), b.id(), b.events()[:k], Sync))
	return b, k, s.locate(b.header())
}

// begin opens a turn and its first step.
func (b *jlBuilder) begin(prompt string) int64 {
	b.t.Helper()
	b.turns++
	b.add(session.TurnStart{Turn: b.turns}.Draft())
	b.user(prompt)
	b.add(session.StepStart{Turn: b.turns, Step: 1}.Draft())
	return b.turns
}

// textTurn appends a complete turn whose answer streamed in deltas
// text-delta chunks (a run the packer turns into one row when ≥ 3).
func (b *jlBuilder) textTurn(prompt string, deltas int) {
	b.t.Helper()
	turn := b.begin(prompt)
	var text strings.Builder
	for i := range deltas {
		w := fmt.Sprintf("word%d ", i)
		text.WriteString(w)
		b.add(session.AssistantChunk{Turn: turn, Step: 1, Chunk: messages.TextDeltaChunk(0, w)}.Draft())
	}
	m, err := messages.NewAssistantMessage([]messages.ContentBlock{messages.TextBlock(text.String())}, storeTestModel)
	require.NoError(b.t, err)
	b.add(session.AssistantMessage{Turn: turn, Step: 1, Message: m}.Draft())
	b.add(session.StepEnd{Turn: turn, Step: 1}.Draft())
	b.add(session.TurnEnd{Turn: turn, Reason: session.TurnEndReason{Kind: session.EndCompleted}}.Draft())
}

// openToolTurn appends a turn that a crash interrupted: the model asked
// for callID, the call was recorded as started, no result.
func (b *jlBuilder) openToolTurn(callID string) {
	b.t.Helper()
	turn := b.begin("run " + callID)
	m, err := messages.NewAssistantMessage([]messages.ContentBlock{messages.ToolCallBlock(callID, "shell", `{}`)}, storeTestModel)
	require.NoError(b.t, err)
	b.add(session.AssistantMessage{Turn: turn, Step: 1, Message: m}.Draft())
	b.add(session.ToolCall{Turn: turn, Step: 1, CallID: callID, Name: "shell", Arguments: `{}`}.Draft())
}

func readRaw(t testing.TB, fsys vfs.FS, path string) []byte {
	t.Helper()
	b, err := vfs.ReadFile(fsys, path)
	require.NoError(t, err)
	return b
}

// writeRaw replaces (or creates, with its directory) the file at path.
func writeRaw(t testing.TB, fsys vfs.FS, path string, data []byte) {
	t.Helper()
	require.NoError(t, fsys.MkdirAll(filepath.Dir(path), 0o700))
	f, err := fsys.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	require.NoError(t, err)
	_, err = f.Write(data)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// headerBytes and batchBytes are the expected encodings.
func headerBytes(h session.Header, plain bool) []byte {
	line := append([]byte(h.JSON().String()), '\n')
	if plain {
		return line
	}
	return session.AppendZstdFrame(nil, line)
}

func batchBytes(events []session.Event, plain, pack bool) []byte {
	recs := session.AppendRecords(nil, events, session.Packing(pack))
	if plain {
		return recs
	}
	return session.AppendZstdFrame(nil, recs)
}

// ---- configuration ----

func TestJSONLConfigValidate(t *testing.T) {
	require.Error(t, JSONLConfig{}.validate(), "Root is required")
	require.Error(t, JSONLConfig{Root: "/r", MaxOpenFiles: -1}.validate())
	require.NoError(t, JSONLConfig{Root: "/r"}.validate())
	_, err := NewJSONLStore(JSONLConfig{})
	require.Error(t, err)
	s, err := NewJSONLStore(JSONLConfig{Root: t.TempDir()})
	require.NoError(t, err, "FS defaults to the OS")
	require.NoError(t, s.Close())
}

// ---- scenario 91: lazy materialization, failed appends ----

func TestJSONLLazyMaterialization(t *testing.T) {
	ctx := t.Context()
	s, m := newMemJSONL(t, JSONLConfig{})
	b := newJL(t, "lazy")
	b.textTurn("hello", 4)
	require.NoError(t, s.Create(b.header()))
	_, err := m.Stat(memRoot)
	require.ErrorIs(t, err, fs.ErrNotExist, "Create writes nothing, not even a directory")
	require.NoError(t, s.Append(ctx, b.id(), nil, Sync))
	_, err = m.Stat(memRoot)
	require.ErrorIs(t, err, fs.ErrNotExist, "an empty append does not materialize")
	listed, err := s.List(ctx)
	require.NoError(t, err)
	require.Empty(t, listed)

	require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))
	path := s.locate(b.header())
	require.Equal(t, filepath.Join(memRoot, "--work-proj--", "lazy", "session.jsonl.zstd"), path)
	_, err = m.Stat(path)
	require.NoError(t, err)
	entries, err := m.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1, "the temp file is gone")
	listed, err = s.List(ctx)
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, b.header(), listed[0].Header)
}

// ---- files on disk ----

// Directories are 0700 and files 0600, on MemFS and on the OS.
func TestJSONLPermissions(t *testing.T) {
	for name, mk := range map[string]func(t *testing.T) (vfs.FS, string){
		"memfs": func(t *testing.T) (vfs.FS, string) { return vfs.NewMem(), memRoot },
		"os":    func(t *testing.T) (vfs.FS, string) { return vfs.OS(), filepath.Join(t.TempDir(), "sessions") },
	} {
		t.Run(name, func(t *testing.T) {
			fsys, root := mk(t)
			s := newJSONLOn(t, fsys, root, JSONLConfig{})
			defer s.Close()
			b := newJL(t, "perm")
			b.textTurn("hello", 3)
			require.NoError(t, s.Create(b.header()))
			require.NoError(t, s.Append(t.Context(), b.id(), b.events(), Sync))
			path := s.locate(b.header())
			for _, dir := range []string{root, filepath.Dir(filepath.Dir(path)), filepath.Dir(path)} {
				fi, err := fsys.Stat(dir)
				require.NoError(t, err)
				require.True(t, fi.IsDir())
				require.Equal(t, fs.FileMode(0o700), fi.Mode().Perm(), dir)
			}
			fi, err := fsys.Stat(path)
			require.NoError(t, err)
			require.Equal(t, fs.FileMode(0o600), fi.Mode().Perm())
			if name == "os" {
				require.Len(t, strings.Split(string(jsonlRevision(t, s, b.id())), ":"), 5, "dev:ino:size:mtime:ctime")
			}
		})
	}
}

func TestJSONLLayoutRejections(t *testing.T) {
	ctx := t.Context()
	h := jlHeader("s1")
	t.Run("other encoding", func(t *testing.T) {
		for _, enc := range encodings {
			m := vfs.NewMem()
			other := newJSONLOn(t, m, memRoot, JSONLConfig{Plain: !enc.plain})
			b := newJL(t, "s1")
			b.textTurn("x", 1)
			require.NoError(t, other.Create(b.header()))
			require.NoError(t, other.Append(ctx, b.id(), b.events(), Sync))
			_, err := newJSONLStore(JSONLConfig{Root: memRoot, Plain: enc.plain}, m)
			require.ErrorIs(t, err, ErrLayout, enc.name)
		}
	})
	t.Run("flat layout", func(t *testing.T) {
		m := vfs.NewMem()
		writeRaw(t, m, filepath.Join(memRoot, "--work-proj--", "s1.jsonl"), []byte(h.JSON().String()+"\n"))
		_, err := newJSONLStore(JSONLConfig{Root: memRoot, Plain: true}, m)
		require.ErrorIs(t, err, ErrLayout)
	})
	t.Run("header at the wrong path", func(t *testing.T) {
		m := vfs.NewMem()
		s := newJSONLOn(t, m, memRoot, JSONLConfig{Plain: true})
		defer s.Close()
		wrong := filepath.Join(memRoot, "--work-proj--", "s2", "session.jsonl")
		writeRaw(t, m, wrong, []byte(h.JSON().String()+"\n"))
		_, err := s.List(ctx)
		require.ErrorIs(t, err, ErrLayout)
		_, err = s.Load(ctx, "s2")
		require.ErrorIs(t, err, ErrLayout)
		require.True(t, IsCorruption(err))
	})
	t.Run("id stored twice", func(t *testing.T) {
		m := vfs.NewMem()
		s := newJSONLOn(t, m, memRoot, JSONLConfig{Plain: true})
		defer s.Close()
		other := h
		other.Cwd = "/elsewhere"
		for _, hh := range []session.Header{h, other} {
			writeRaw(t, m, s.locate(hh), []byte(hh.JSON().String()+"\n"))
		}
		_, err := s.List(ctx)
		require.ErrorIs(t, err, ErrLayout)
		_, err = s.Load(ctx, h.ID)
		require.ErrorIs(t, err, ErrLayout)
		require.ErrorIs(t, s.Create(h), ErrLayout)
	})
}

// List shows sessions whose header is complete and skips the rest.
func TestJSONLListSkipsIncompleteFiles(t *testing.T) {
	for _, enc := range encodings {
		t.Run(enc.name, func(t *testing.T) {
			ctx := t.Context()
			s, m := newMemJSONL(t, JSONLConfig{Plain: enc.plain})
			b := newJL(t, "good")
			b.textTurn("hello", 3)
			require.NoError(t, s.Create(b.header()))
			require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))
			full := headerBytes(jlHeader("x"), enc.plain)
			for id, data := range map[string][]byte{
				"empty":      nil,
				"half":       full[:len(full)-3],
				"not-header": batchBytes(b.events()[:1], enc.plain, true),
			} {
				writeRaw(t, m, s.locate(jlHeader(session.SessionID(id))), data)
			}
			writeRaw(t, m, s.locate(jlHeader("tmp-only"))+".0123456789abcdef.tmp", full)
			listed, err := s.List(ctx)
			require.NoError(t, err)
			require.Len(t, listed, 1)
			require.Equal(t, b.header(), listed[0].Header)

			// A header longer than the first read.
			long := jlHeader("long")
			rng := rand.New(rand.NewPCG(3, 4))
			preset := make([]byte, 3*headerPrefix)
			for i := range preset {
				preset[i] = "abcdefghijklmnopqrstuvwxyz0123456789"[rng.IntN(36)] // incompressible enough
			}
			long.AgentPreset = string(preset)
			require.NoError(t, s.Create(long))
			lb := newJL(t, "long")
			lb.l = mustNew(t, long)
			lb.textTurn("x", 1)
			require.NoError(t, s.Append(ctx, "long", lb.events(), Sync))
			listed, err = s.List(ctx)
			require.NoError(t, err)
			require.Len(t, listed, 2)
			require.Equal(t, long, listed[1].Header)
		})
	}
}

func mustNew(t testing.TB, h session.Header) *session.Log {
	t.Helper()
	l, err := session.New(h)
	require.NoError(t, err)
	return l
}

// Thousands of sessions must not mean thousands of open files.
func TestJSONLBoundsOpenFiles(t *testing.T) {
	ctx := t.Context()
	const maxOpen, sessions = 3, 20
	s, m := newMemJSONL(t, JSONLConfig{MaxOpenFiles: maxOpen})
	builders := make([]*jlBuilder, sessions)
	for i := range builders {
		builders[i] = newJL(t, session.SessionID(fmt.Sprintf("s%02d", i)))
		for turn := range 4 {
			builders[i].textTurn(fmt.Sprintf("t%d", turn), 2)
		}
		require.NoError(t, s.Create(builders[i].header()))
	}
	const per = 8 // events per append
	for round := int64(0); round*per < builders[0].len(); round++ {
		for _, b := range builders {
			require.NoError(t, s.Append(ctx, b.id(), b.events()[round*per:min((round+1)*per, b.len())], Sync))
			require.LessOrEqual(t, m.OpenFiles(), maxOpen)
		}
	}
	for _, b := range builders {
		got, err := s.Load(ctx, b.id())
		require.NoError(t, err)
		requireSameEvents(t, b.events(), got.Events)
		require.LessOrEqual(t, m.OpenFiles(), maxOpen)
	}
	require.NoError(t, s.Close())
	require.Zero(t, m.OpenFiles())
}

// By default a store keeps a handle per session of a thousand-session
// host: a write (a turn end's barrier most often) does not reopen its
// file. With 256 handles, as before, the second round reopened all but
// 256 of them.
func TestJSONLDefaultKeepsTheHandlesOfAThousandSessions(t *testing.T) {
	ctx := t.Context()
	const sessions = 1000
	limit := descriptorLimit()
	require.GreaterOrEqual(t, defaultMaxOpenFiles(limit), sessions,
		"the default under this process's descriptor limit (%d): a quarter of it is the most handles cached", limit)
	s, m := newMemJSONL(t, JSONLConfig{})
	var opens atomic.Int64
	m.InjectError(func(op vfs.Op, _ string) error {
		if op == vfs.OpOpen {
			opens.Add(1)
		}
		return nil
	})
	builders := make([]*jlBuilder, sessions)
	for i := range builders {
		builders[i] = newJL(t, session.SessionID(fmt.Sprintf("s%04d", i)))
		builders[i].textTurn("one", 2)
		builders[i].textTurn("two", 2)
		require.NoError(t, s.Create(builders[i].header()))
	}
	half := func(b *jlBuilder) int64 { return b.len() / 2 }
	for _, b := range builders {
		require.NoError(t, s.Append(ctx, b.id(), b.events()[:half(b)], Sync))
	}
	opens.Store(0)
	for _, b := range builders {
		require.NoError(t, s.Append(ctx, b.id(), b.events()[half(b):], Sync))
	}
	require.Zero(t, opens.Load(), "files reopened by the second round of writes")
	require.Equal(t, sessions, m.OpenFiles())
}

func TestJSONLDefaultMaxOpenFilesFollowsTheDescriptorLimit(t *testing.T) {
	for limit, want := range map[uint64]int{0: DefaultMaxOpenFiles, 256: 256, 1024: 256, 8192: 2048, 20000: DefaultMaxOpenFiles, 1 << 63: DefaultMaxOpenFiles} {
		require.Equal(t, want, defaultMaxOpenFiles(limit), "limit %d", limit)
	}
}

// A second store writing the same root behind the first one's back is
// noticed: the first one's next append is fenced, not interleaved.
func TestJSONLNoticesAnotherWriter(t *testing.T) {
	ctx := t.Context()
	a, m := newMemJSONL(t, JSONLConfig{})
	b := newJL(t, "shared")
	b.textTurn("one", 3)
	k1 := b.len()
	b.textTurn("two", 3)
	k2 := b.len()
	b.textTurn("three", 3)
	require.NoError(t, a.Create(b.header()))
	require.NoError(t, a.Append(ctx, b.id(), b.events()[:k1], Sync))

	other := newJSONLOn(t, m, memRoot, JSONLConfig{})
	defer other.Close()
	require.ErrorIs(t, other.Create(b.header()), ErrExists)
	require.NoError(t, other.Append(ctx, b.id(), b.events()[k1:k2], Sync))

	err := a.Append(ctx, b.id(), b.events()[k1:k2], Sync)
	var fe *FenceError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, FenceError{ID: b.id(), Want: k2, Got: k1}, *fe)
	require.NoError(t, a.Append(ctx, b.id(), b.from(k2), Sync))
	got, err := other.Load(ctx, b.id())
	require.NoError(t, err)
	requireSameEvents(t, b.events(), got.Events)
}

func TestJSONLContextCancellation(t *testing.T) {
	s, m := newMemJSONL(t, JSONLConfig{})
	b := newJL(t, "ctx")
	b.textTurn("x", 1)
	require.NoError(t, s.Create(b.header()))
	cause := errors.New("caller gave up")
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(cause)
	require.ErrorIs(t, s.Append(ctx, b.id(), b.events(), Sync), cause)
	_, err := m.Stat(memRoot)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.NoError(t, s.Append(t.Context(), b.id(), b.events(), Sync))
	_, err = s.Load(ctx, b.id())
	require.ErrorIs(t, err, cause)
	_, err = s.Inspect(ctx, b.id())
	require.ErrorIs(t, err, cause)
	_, err = s.ReadFrom(ctx, b.id(), 0)
	require.ErrorIs(t, err, cause)
	_, err = s.List(ctx)
	require.ErrorIs(t, err, cause)
}

// ---- the corpus ----

// TestCorpusThroughJSONLStore writes every log of the interop corpus
// through the store, in both encodings and in a few batches, and loads it
// back: the same header and Equal events (plus the closers of a log that
// ends in an open turn).
func TestCorpusThroughJSONLStore(t *testing.T) {
	root, err := fixtures.CorpusDir()
	require.NoError(t, err)
	paths, err := fixtures.CorpusFiles()
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(paths), 60)
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		file, err := session.ParseFile(fixtures.Substitute(raw), path)
		require.NoError(t, err, path)
		require.Nil(t, file.Torn, path)
		for _, enc := range encodings {
			t.Run(strings.TrimPrefix(path, root+"/")+"/"+enc.name, func(t *testing.T) {
				ctx := t.Context()
				dir := t.TempDir()
				s := newJSONLOn(t, vfs.OS(), dir, JSONLConfig{Plain: enc.plain})
				defer s.Close()
				require.NoError(t, s.Create(file.Header))
				events := file.Events
				// Batches of growing size: 1, 2, 4, ... so runs are packed
				// within batches and cut at their edges.
				for start, n := 0, 1; start < len(events); start, n = start+n, n*2 {
					require.NoError(t, s.Append(ctx, file.Header.ID, events[start:min(start+n, len(events))], Sync))
				}
				listed, err := s.List(ctx)
				require.NoError(t, err)
				if len(events) == 0 {
					require.Empty(t, listed)
					return
				}
				require.Len(t, listed, 1)
				require.Equal(t, file.Header, listed[0].Header)

				got, err := s.Load(ctx, file.Header.ID)
				require.NoError(t, err)
				require.Equal(t, file.Header, got.Header)
				require.Nil(t, got.Torn)
				requireSameEvents(t, events, got.Events[:len(events)])
				requireSameEvents(t, session.InterruptedTurnClosers(events), got.Closers)
				requireSameEvents(t, got.Closers, got.Events[len(events):])

				// And the bytes read back by the file reader alone.
				reread, err := session.ReadFile(s.locate(file.Header))
				require.NoError(t, err)
				require.Equal(t, file.Header, reread.Header)
				requireSameEvents(t, got.Events, reread.Events)
			})
		}
	}
}

// Under the session's writer lock an append does not stat the log to look
// for another writer's change (nobody else writes it); without Lock every
// append after the first still does, which TestJSONLNoticesAnotherWriter
// relies on.
func TestJSONLHeldLockSkipsTheSizeCheck(t *testing.T) {
	ctx := t.Context()
	for _, lock := range []bool{false, true} {
		t.Run(fmt.Sprintf("lock=%v", lock), func(t *testing.T) {
			s, m := newMemJSONL(t, JSONLConfig{Lock: lock})
			b := newJL(t, "stat")
			var ends []int64
			for i := range 4 {
				b.textTurn(fmt.Sprintf("turn %d", i), 2)
				ends = append(ends, b.len())
			}
			require.NoError(t, s.Create(b.header()))
			require.NoError(t, s.Append(ctx, b.id(), b.events()[:ends[0]], Sync))
			path := s.locate(b.header())
			var stats atomic.Int64
			m.InjectError(func(op vfs.Op, p string) error {
				if op == vfs.OpStat && p == path {
					stats.Add(1)
				}
				return nil
			})
			for i := 1; i < len(ends); i++ {
				require.NoError(t, s.Append(ctx, b.id(), b.events()[ends[i-1]:ends[i]], Durability(i%2 == 0)))
			}
			m.InjectError(nil)
			require.Equal(t, map[bool]int64{false: 3, true: 0}[lock], stats.Load(), "stats of the log by three appends")
			got, err := s.Load(ctx, b.id())
			require.NoError(t, err)
			requireSameEvents(t, b.events(), got.Events)
		})
	}
}
