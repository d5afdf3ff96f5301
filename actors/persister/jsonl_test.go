package persister

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

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
	cfg.FS, cfg.Root = fsys, root
	s, err := NewJSONLStore(cfg)
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

const jlNow int64 = 1_700_000_000_000

var jlModel = messages.ModelSource{Provider: "deepseek-official", Model: "deepseek-v4-flash"}

// jlBuilder builds a session log that obeys the session trace.
type jlBuilder struct {
	t     testing.TB
	l     *session.Log
	now   int64
	turns int64
}

func jlHeader(id session.SessionID) session.Header {
	return session.Header{ID: id, CreatedAt: jlNow, Cwd: "/work/proj"}
}

func newJL(t testing.TB, id session.SessionID) *jlBuilder {
	t.Helper()
	l, err := session.New(jlHeader(id))
	require.NoError(t, err)
	return &jlBuilder{t: t, l: l, now: jlNow}
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
	require.NoError(t, s.Append(t.Context(), b.id(), b.events()[:k], true))
	return b, k, s.Locate(b.header())
}

func (b *jlBuilder) id() session.SessionID          { return b.l.ID() }
func (b *jlBuilder) header() session.Header         { return b.l.Header() }
func (b *jlBuilder) len() int64                     { return b.l.Len() }
func (b *jlBuilder) events() []session.Event        { return b.l.Events().Slice() }
func (b *jlBuilder) from(seq int64) []session.Event { return b.l.EventsFrom(seq).Slice() }

func (b *jlBuilder) add(d session.Draft) session.Event {
	b.t.Helper()
	b.now++
	e, err := b.l.Append(d, b.now)
	require.NoError(b.t, err)
	return e
}

func (b *jlBuilder) user(text string) {
	b.t.Helper()
	m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(text)}, messages.UserSource())
	require.NoError(b.t, err)
	b.add(session.UserMessage{Message: m}.Draft())
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
	m, err := messages.NewAssistantMessage([]messages.ContentBlock{messages.TextBlock(text.String())}, jlModel)
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
	m, err := messages.NewAssistantMessage([]messages.ContentBlock{messages.ToolCallBlock(callID, "shell", `{}`)}, jlModel)
	require.NoError(b.t, err)
	b.add(session.AssistantMessage{Turn: turn, Step: 1, Message: m}.Draft())
	b.add(session.ToolCall{Turn: turn, Step: 1, CallID: callID, Name: "shell", Arguments: `{}`}.Draft())
}

func jlRequireEvents(t testing.TB, want, got []session.Event) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.Truef(t, want[i].Equal(got[i]), "event %d: want %d %s %s, got %d %s %s", i,
			want[i].Seq(), want[i].Type(), want[i].Data(), got[i].Seq(), got[i].Type(), got[i].Data())
	}
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
	recs := session.AppendRecords(nil, events, pack)
	if plain {
		return recs
	}
	return session.AppendZstdFrame(nil, recs)
}

// ---- configuration ----

func TestJSONLConfigValidate(t *testing.T) {
	require.Error(t, JSONLConfig{}.Validate(), "Root is required")
	require.Error(t, JSONLConfig{Root: "/r", MaxOpenFiles: -1}.Validate())
	require.NoError(t, JSONLConfig{Root: "/r"}.Validate())
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
	require.NoError(t, s.Append(ctx, b.id(), nil, true))
	_, err = m.Stat(memRoot)
	require.ErrorIs(t, err, fs.ErrNotExist, "an empty append does not materialize")
	listed, err := s.List(ctx)
	require.NoError(t, err)
	require.Empty(t, listed)

	require.NoError(t, s.Append(ctx, b.id(), b.events(), true))
	path := s.Locate(b.header())
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
				err := s.Append(ctx, b.id(), b.from(k), true)
				require.ErrorIs(t, err, vfs.ErrInjected)
				m.InjectError(nil)
				require.Equal(t, before, readRaw(t, m, path), "nothing of the failed batch stays")
				require.Equal(t, before, readRaw(t, m.CrashClone(), path))

				require.NoError(t, s.Append(ctx, b.id(), b.from(k), true), "the retry of the same batch")
				got, err := s.Load(ctx, b.id())
				require.NoError(t, err)
				jlRequireEvents(t, b.events(), got.Events)
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
			require.ErrorIs(t, s.Append(ctx, b.id(), b.from(k), true), vfs.ErrInjected)
			m.InjectError(nil)
			require.Greater(t, len(readRaw(t, m, path)), len(before), "the batch is still there")

			switch next {
			case "append":
				require.NoError(t, s.Append(ctx, b.id(), b.from(k), true))
				got, err := s.Load(ctx, b.id())
				require.NoError(t, err)
				jlRequireEvents(t, b.events(), got.Events)
			case "load":
				got, err := s.Load(ctx, b.id())
				require.NoError(t, err)
				jlRequireEvents(t, b.events()[:k], got.Events)
				require.Equal(t, before, readRaw(t, m, path))
			}
		})
	}
}

// Release and Close are barriers: what appends without durable wrote,
// through a cached handle evicted and closed since, survives a crash after
// them. Before them a crash may cut it (here: all of it).
func TestJSONLReleaseAndCloseAreBarriers(t *testing.T) {
	ctx := t.Context()
	s, m := newMemJSONL(t, JSONLConfig{MaxOpenFiles: 1})
	var bs []*jlBuilder
	for _, id := range []session.SessionID{"rel", "clo"} {
		b := newJL(t, id)
		b.textTurn("one", 2)
		k := b.len()
		b.textTurn("two", 2)
		require.NoError(t, s.Create(b.header()))
		require.NoError(t, s.Append(ctx, b.id(), b.events()[:k], false))
		require.NoError(t, s.Append(ctx, b.id(), b.from(k), false))
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
	jlRequireEvents(t, bs[0].events(), got.Events)
	require.NoError(t, s.Close())
	got, err = crashed().Load(ctx, bs[1].id())
	require.NoError(t, err)
	jlRequireEvents(t, bs[1].events(), got.Events)
}

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
	require.ErrorIs(t, s.Append(ctx, b.id(), b.events(), true), vfs.ErrInjected)
	require.NoError(t, s.Append(ctx, b.id(), b.events(), true))
	m.InjectError(nil)
	got, err := newJSONLOn(t, m.CrashClone(), memRoot, JSONLConfig{}).Load(ctx, b.id())
	require.NoError(t, err, "the acknowledged log is lost in a crash")
	jlRequireEvents(t, b.events(), got.Events)
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
			path := s.Locate(b.header())
			dir := filepath.Dir(path)
			m.InjectError(func(op vfs.Op, p string) error {
				if op == step && (strings.HasPrefix(p, dir) || op == vfs.OpMkdir) {
					return vfs.ErrInjected
				}
				return nil
			})
			require.ErrorIs(t, s.Append(ctx, b.id(), b.events(), true), vfs.ErrInjected)
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

			require.NoError(t, s.Append(ctx, b.id(), b.events(), true))
			got, err := s.Load(ctx, b.id())
			require.NoError(t, err)
			jlRequireEvents(t, b.events(), got.Events)
		})
	}

	// The directory sync fails and so does unlinking the published file:
	// it is not listed, and the next operation unlinks it first.
	ctx := t.Context()
	s, m := newMemJSONL(t, JSONLConfig{})
	b := newJL(t, "orphan")
	b.textTurn("hello", 3)
	require.NoError(t, s.Create(b.header()))
	path := s.Locate(b.header())
	m.InjectError(func(op vfs.Op, p string) error {
		if (op == vfs.OpSyncDir && p == filepath.Dir(path)) || (op == vfs.OpRemove && p == path) {
			return vfs.ErrInjected
		}
		return nil
	})
	require.ErrorIs(t, s.Append(ctx, b.id(), b.events(), true), vfs.ErrInjected)
	m.InjectError(nil)
	_, err := m.Stat(path)
	require.NoError(t, err, "the unlink failed")
	listed, err := s.List(ctx)
	require.NoError(t, err)
	require.Empty(t, listed)
	require.ErrorIs(t, s.Create(b.header()), ErrExists, "still registered")
	_, err = s.Load(ctx, b.id())
	require.ErrorIs(t, err, ErrNotFound)
	require.NoError(t, s.Append(ctx, b.id(), b.events(), true))
	got, err := s.Load(ctx, b.id())
	require.NoError(t, err)
	jlRequireEvents(t, b.events(), got.Events)
}

// ---- scenario 93: framing ----

func TestJSONLFraming(t *testing.T) {
	for _, enc := range encodings {
		for _, pack := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/pack=%v", enc.name, pack), func(t *testing.T) {
				ctx := t.Context()
				s, m := newMemJSONL(t, JSONLConfig{Plain: enc.plain, NoPack: !pack})
				b := newJL(t, "frames")
				b.textTurn("one", 6)
				k1 := b.len()
				b.textTurn("two", 2)
				k2 := b.len()
				b.openToolTurn("call-1")
				require.NoError(t, s.Create(b.header()))
				require.NoError(t, s.Append(ctx, b.id(), b.events()[:k1], true))
				path := s.Locate(b.header())
				if enc.plain {
					require.True(t, strings.HasSuffix(path, "/session.jsonl"))
				}

				data := readRaw(t, m, path)
				want := append(headerBytes(b.header(), enc.plain), batchBytes(b.events()[:k1], enc.plain, pack)...)
				require.Equal(t, want, data, "the header, then the first batch")
				if !enc.plain {
					hdr := headerBytes(b.header(), false)
					require.NotZero(t, hdr[4]&0x04, "the header frame is checksummed")
					require.NotZero(t, data[len(hdr)+4]&0x04, "the batch frame is checksummed")
				}
				records := string(session.AppendRecords(nil, b.events()[:k1], pack))
				require.Equal(t, pack, strings.Contains(records, `-chunks"`), "a run of 6 deltas is one row when packing")

				for _, batch := range [][2]int64{{k1, k2}, {k2, b.len()}} {
					before := readRaw(t, m, path)
					events := b.events()[batch[0]:batch[1]]
					require.NoError(t, s.Append(ctx, b.id(), events, true))
					after := readRaw(t, m, path)
					require.True(t, bytes.HasPrefix(after, before), "earlier bytes are never rewritten")
					require.Equal(t, batchBytes(events, enc.plain, pack), after[len(before):], "one frame per batch")
				}
				f, err := session.ParseFile(readRaw(t, m, path), path)
				require.NoError(t, err)
				require.Equal(t, !enc.plain, f.Compressed)
				jlRequireEvents(t, b.events(), f.Events)
			})
		}
	}
}

// ---- scenario 94: torn frames ----

// The complete records of a torn final frame are kept: Inspect shows them
// with the closers in memory; Load truncates the frame and re-appends them
// with the closers as one new frame.
func TestJSONLTornFrameIsRecovered(t *testing.T) {
	ctx := t.Context()
	s, m := newMemJSONL(t, JSONLConfig{})
	b := newJL(t, "torn")
	b.textTurn("one", 5)
	k := b.len()
	b.openToolTurn("call-1")
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events()[:k], true))
	require.NoError(t, s.Append(ctx, b.id(), b.from(k), true))
	path := s.Locate(b.header())
	whole := readRaw(t, m, path)
	lastFrame := int64(len(whole) - len(batchBytes(b.from(k), false, true)))
	torn := whole[:len(whole)-2] // the crash cut the checksum
	writeRaw(t, m, path, torn)

	// A fresh store, as after a restart.
	s2 := newJSONLOn(t, m, memRoot, JSONLConfig{})
	defer s2.Close()
	rev := jsonlRevision(t, s2, b.id())
	in, err := s2.Inspect(ctx, b.id())
	require.NoError(t, err)
	require.NotNil(t, in.Torn)
	require.Equal(t, lastFrame, in.Torn.Offset)
	jlRequireEvents(t, b.from(k), in.Torn.Recovered)
	closers := session.InterruptedTurnClosers(b.events())
	require.Len(t, closers, 3)
	jlRequireEvents(t, append(b.events(), closers...), in.Events)
	jlRequireEvents(t, closers, in.Closers)
	require.Equal(t, torn, readRaw(t, m, path), "Inspect writes nothing")
	require.Equal(t, rev, in.Revision)
	require.Equal(t, rev, jsonlRevision(t, s2, b.id()))

	read, err := s2.ReadFrom(ctx, b.id(), 0)
	require.NoError(t, err)
	jlRequireEvents(t, b.events(), read) // the recovered records are stored bytes

	got, err := s2.Load(ctx, b.id())
	require.NoError(t, err)
	jlRequireEvents(t, in.Events, got.Events)
	require.Equal(t, in.Torn.Offset, got.Torn.Offset)
	require.NotEqual(t, rev, got.Revision)
	after := readRaw(t, m, path)
	require.Equal(t, whole[:lastFrame], after[:lastFrame], "bytes before the torn frame are kept")
	require.Equal(t, batchBytes(append(b.from(k), closers...), false, true), after[lastFrame:],
		"the recovered records and the closers, re-encoded as one frame")
	require.Equal(t, after, readRaw(t, m.CrashClone(), path), "the repair is durable")

	again, err := s2.Load(ctx, b.id())
	require.NoError(t, err)
	require.Nil(t, again.Torn)
	require.Empty(t, again.Closers)
	jlRequireEvents(t, got.Events, again.Events)
	require.Equal(t, got.Revision, again.Revision)
}

// A plain file's torn final line is dropped; Load truncates to the last
// good line and appends the closers.
func TestJSONLTornLineIsDropped(t *testing.T) {
	ctx := t.Context()
	s, m := newMemJSONL(t, JSONLConfig{Plain: true})
	b := newJL(t, "torn-plain")
	b.textTurn("one", 5)
	b.openToolTurn("call-1")
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events(), true))
	path := s.Locate(b.header())
	whole := readRaw(t, m, path)
	writeRaw(t, m, path, whole[:len(whole)-9]) // the tool/call line is cut
	committed := int64(bytes.LastIndexByte(whole[:len(whole)-9], '\n') + 1)
	kept := b.events()[:b.len()-1]

	s2 := newJSONLOn(t, m, memRoot, JSONLConfig{Plain: true})
	defer s2.Close()
	got, err := s2.Load(ctx, b.id())
	require.NoError(t, err)
	require.NotNil(t, got.Torn)
	require.Equal(t, committed, got.Torn.Offset)
	closers := session.InterruptedTurnClosers(kept)
	require.Equal(t, "TOOL_NOT_STARTED", closers[0].Payload().(session.ToolResult).Error.Code,
		"the call's tool/call was torn off")
	jlRequireEvents(t, append(slices.Clone(kept), closers...), got.Events)
	after := readRaw(t, m, path)
	require.Equal(t, whole[:committed], after[:committed])
	require.Equal(t, session.AppendRecords(nil, closers, true), after[committed:])
}

// A complete frame whose content ends inside a record is not a crash
// artifact (a crash cuts a frame, and a cut frame is not complete): it is
// corruption, and nothing is repaired.
func TestJSONLCompleteFrameWithTornRecordIsCorruption(t *testing.T) {
	ctx := t.Context()
	s, m := newMemJSONL(t, JSONLConfig{})
	b, k, path := twoTurnsFirstStored(t, s, "bad-frame")
	recs := session.AppendRecords(nil, b.from(k), true)
	bad := append(readRaw(t, m, path), session.AppendZstdFrame(nil, recs[:len(recs)-10])...)
	writeRaw(t, m, path, bad)

	s2 := newJSONLOn(t, m, memRoot, JSONLConfig{})
	defer s2.Close()
	_, err := s2.Load(ctx, b.id())
	require.True(t, IsCorruption(err), "%v", err)
	require.ErrorContains(t, err, "torn JSONL record")
	_, err = s2.Inspect(ctx, b.id())
	require.True(t, IsCorruption(err))
	_, err = s2.ReadFrom(ctx, b.id(), 0)
	require.True(t, IsCorruption(err))
	require.Error(t, s2.Append(ctx, b.id(), b.from(k), true))
	require.Equal(t, bad, readRaw(t, m, path), "corruption is never repaired")
}

// Damage followed by a turn/end is in the committed region: corruption.
func TestJSONLDamageBeforeTurnEndIsCorruption(t *testing.T) {
	ctx := t.Context()
	s, m := newMemJSONL(t, JSONLConfig{Plain: true})
	b := newJL(t, "damaged")
	b.textTurn("one", 2)
	b.textTurn("two", 2)
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events(), true))
	path := s.Locate(b.header())
	data := readRaw(t, m, path)
	lines := bytes.SplitAfter(data, []byte("\n"))
	lines[3] = []byte("{not json\n")
	bad := bytes.Join(lines, nil)
	writeRaw(t, m, path, bad)

	s2 := newJSONLOn(t, m, memRoot, JSONLConfig{Plain: true})
	defer s2.Close()
	_, err := s2.Load(ctx, b.id())
	require.True(t, IsCorruption(err), "%v", err)
	var ce *session.CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, 4, ce.Line)
	require.Equal(t, bad, readRaw(t, m, path))
}

// Format version and unknown types are refusals, not damage.
func TestJSONLRefusesUnreadableLogs(t *testing.T) {
	ctx := t.Context()
	h := jlHeader("future")
	for name, c := range map[string]struct {
		body  string
		check func(t *testing.T, err error)
	}{
		"newer version": {
			body: `{"type":"session","version":1,"id":"future","createdAt":1700000000000,"cwd":"/work/proj","delegationDepth":0}` + "\n",
			check: func(t *testing.T, err error) {
				var fv *session.FormatVersionError
				require.ErrorAs(t, err, &fv)
				require.Equal(t, int64(1), fv.Version)
				require.False(t, IsCorruption(err))
			},
		},
		"unknown type": {
			body: h.JSON().String() + "\n" + `{"seq":0,"time":1,"type":"future/event","data":{}}` + "\n",
			check: func(t *testing.T, err error) {
				require.ErrorIs(t, err, session.ErrInvalid)
				var ut *session.UnsupportedTypeError
				require.ErrorAs(t, err, &ut)
				require.False(t, IsCorruption(err))
			},
		},
		"invalid event": {
			body: h.JSON().String() + "\n" + `{"seq":0,"time":1,"type":"turn/start","data":{"turn":1},"surfaceOp":"append"}` + "\n",
			check: func(t *testing.T, err error) {
				require.True(t, IsCorruption(err), "%v", err)
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			m := vfs.NewMem()
			s := newJSONLOn(t, m, memRoot, JSONLConfig{Plain: true})
			defer s.Close()
			path := s.Locate(h)
			writeRaw(t, m, path, []byte(c.body))
			_, err := s.Load(ctx, h.ID)
			c.check(t, err)
			_, err = s.Inspect(ctx, h.ID)
			c.check(t, err)
			require.Equal(t, c.body, string(readRaw(t, m, path)))
		})
	}
}

// An append to a file with a torn tail, before any Load, truncates the
// tail (re-appending what it recovers, without closers) and continues.
func TestJSONLAppendAfterTornTail(t *testing.T) {
	for _, enc := range encodings {
		t.Run(enc.name, func(t *testing.T) {
			ctx := t.Context()
			s, m := newMemJSONL(t, JSONLConfig{Plain: enc.plain})
			b, k, _ := twoTurnsFirstStored(t, s, "continue")
			require.NoError(t, s.Append(ctx, b.id(), b.from(k), true))
			path := s.Locate(b.header())
			whole := readRaw(t, m, path)
			writeRaw(t, m, path, whole[:len(whole)-2])
			// zstd: the torn frame's records are all recovered; plain: the
			// cut turn/end line is lost.
			next := b.len()
			if enc.plain {
				next--
			}

			s2 := newJSONLOn(t, m, memRoot, JSONLConfig{Plain: enc.plain})
			defer s2.Close()
			c := newJL(t, "continue")
			c.l = mustRestore(t, b.header(), b.events()[:next])
			if enc.plain {
				// Close the turn the crash left open, as the resumed
				// session would have.
				c.add(session.TurnEnd{Turn: 2, Reason: session.TurnEndReason{Kind: session.EndCompleted}}.Draft())
			}
			c.turns = 2
			c.textTurn("three", 3)
			err := s2.Append(ctx, b.id(), c.from(next-1), true)
			var fe *FenceError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, next, fe.Want)
			require.NoError(t, s2.Append(ctx, b.id(), c.from(next), true))
			got, err := s2.Load(ctx, b.id())
			require.NoError(t, err)
			require.Nil(t, got.Torn)
			require.Empty(t, got.Closers)
			jlRequireEvents(t, c.events(), got.Events)
		})
	}
}

func mustRestore(t testing.TB, h session.Header, events []session.Event) *session.Log {
	t.Helper()
	l, err := session.Restore(h, events)
	require.NoError(t, err)
	return l
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
			require.NoError(t, s.Append(t.Context(), b.id(), b.events(), true))
			path := s.Locate(b.header())
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
	path := s.Locate(b.header())
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
	require.NoError(t, s.Append(ctx, b.id(), b.events(), true))
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
					require.NoError(t, after.Append(ctx, b.id(), b.events(), true), "the first append replaces a torn creation")
					got, err := after.Load(ctx, b.id())
					require.NoError(t, err)
					jlRequireEvents(t, b.events(), got.Events)
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
				jlRequireEvents(t, session.InterruptedTurnClosers(b.events()[:k]), got.Events[k:])
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
		return s.Append(t.Context(), b.id(), b.events(), true)
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
			require.NoError(t, other.Append(ctx, b.id(), b.events(), true))
			_, err := NewJSONLStore(JSONLConfig{Root: memRoot, FS: m, Plain: enc.plain})
			require.ErrorIs(t, err, ErrLayout, enc.name)
		}
	})
	t.Run("flat layout", func(t *testing.T) {
		m := vfs.NewMem()
		writeRaw(t, m, filepath.Join(memRoot, "--work-proj--", "s1.jsonl"), []byte(h.JSON().String()+"\n"))
		_, err := NewJSONLStore(JSONLConfig{Root: memRoot, FS: m, Plain: true})
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
			writeRaw(t, m, s.Locate(hh), []byte(hh.JSON().String()+"\n"))
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
			require.NoError(t, s.Append(ctx, b.id(), b.events(), true))
			full := headerBytes(jlHeader("x"), enc.plain)
			for id, data := range map[string][]byte{
				"empty":      nil,
				"half":       full[:len(full)-3],
				"not-header": batchBytes(b.events()[:1], enc.plain, true),
			} {
				writeRaw(t, m, s.Locate(jlHeader(session.SessionID(id))), data)
			}
			writeRaw(t, m, s.Locate(jlHeader("tmp-only"))+".0123456789abcdef.tmp", full)
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
			require.NoError(t, s.Append(ctx, "long", lb.events(), true))
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
			require.NoError(t, s.Append(ctx, b.id(), b.events()[round*per:min((round+1)*per, b.len())], true))
			require.LessOrEqual(t, m.OpenFiles(), maxOpen)
		}
	}
	for _, b := range builders {
		got, err := s.Load(ctx, b.id())
		require.NoError(t, err)
		jlRequireEvents(t, b.events(), got.Events)
		require.LessOrEqual(t, m.OpenFiles(), maxOpen)
	}
	require.NoError(t, s.Close())
	require.Zero(t, m.OpenFiles())
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
	require.NoError(t, a.Append(ctx, b.id(), b.events()[:k1], true))

	other := newJSONLOn(t, m, memRoot, JSONLConfig{})
	defer other.Close()
	require.ErrorIs(t, other.Create(b.header()), ErrExists)
	require.NoError(t, other.Append(ctx, b.id(), b.events()[k1:k2], true))

	err := a.Append(ctx, b.id(), b.events()[k1:k2], true)
	var fe *FenceError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, FenceError{ID: b.id(), Want: k2, Got: k1}, *fe)
	require.NoError(t, a.Append(ctx, b.id(), b.from(k2), true))
	got, err := other.Load(ctx, b.id())
	require.NoError(t, err)
	jlRequireEvents(t, b.events(), got.Events)
}

func TestJSONLContextCancellation(t *testing.T) {
	s, m := newMemJSONL(t, JSONLConfig{})
	b := newJL(t, "ctx")
	b.textTurn("x", 1)
	require.NoError(t, s.Create(b.header()))
	cause := errors.New("caller gave up")
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(cause)
	require.ErrorIs(t, s.Append(ctx, b.id(), b.events(), true), cause)
	_, err := m.Stat(memRoot)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.NoError(t, s.Append(t.Context(), b.id(), b.events(), true))
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
					require.NoError(t, s.Append(ctx, file.Header.ID, events[start:min(start+n, len(events))], true))
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
				jlRequireEvents(t, events, got.Events[:len(events)])
				jlRequireEvents(t, session.InterruptedTurnClosers(events), got.Closers)
				jlRequireEvents(t, got.Closers, got.Events[len(events):])

				// And the bytes read back by the file reader alone.
				reread, err := session.ReadFile(s.Locate(file.Header))
				require.NoError(t, err)
				require.Equal(t, file.Header, reread.Header)
				jlRequireEvents(t, got.Events, reread.Events)
			})
		}
	}
}

// ---- benchmarks ----

// benchBatches returns the batches of one session: each a turn of a
// realistic mix (prompt, a tool step with streamed arguments, a text step
// with streamed deltas), as the write-behind would hand them over.
func benchBatches(b *testing.B, turns int) [][]session.Event {
	b.Helper()
	l := newJL(b, "bench")
	var batches [][]session.Event
	for turn := int64(1); turn <= int64(turns); turn++ {
		start := l.len()
		tt := l.begin(fmt.Sprintf("request %d", turn))
		callID := fmt.Sprintf("call-%d", turn)
		for i := range 20 {
			l.add(session.AssistantChunk{Turn: tt, Step: 1, Chunk: messages.ToolCallDeltaChunk(0, callID, fmt.Sprintf(`"a%d"`, i))}.Draft())
		}
		m, err := messages.NewAssistantMessage([]messages.ContentBlock{messages.ToolCallBlock(callID, "read", `{"path":"x"}`)}, jlModel)
		require.NoError(b, err)
		l.add(session.AssistantMessage{Turn: tt, Step: 1, Message: m, Usage: messages.TokenUsage{InputTokens: 1000, OutputTokens: 40}, HasUsage: true}.Draft())
		call := l.add(session.ToolCall{Turn: tt, Step: 1, CallID: callID, Name: "read", Arguments: `{"path":"x"}`}.Draft())
		res := messages.NewToolResultMessage(callID, []messages.ContentBlock{messages.TextBlock(strings.Repeat("file contents ", 40))}, false)
		l.add(session.ToolResult{Turn: tt, Step: 1, Message: res}.Draft().WithSources([]int64{call.Seq()}))
		l.add(session.StepEnd{Turn: tt, Step: 1}.Draft())
		l.add(session.StepStart{Turn: tt, Step: 2}.Draft())
		var text strings.Builder
		for i := range 40 {
			w := fmt.Sprintf("word%d ", i)
			text.WriteString(w)
			l.add(session.AssistantChunk{Turn: tt, Step: 2, Chunk: messages.TextDeltaChunk(0, w)}.Draft())
		}
		m, err = messages.NewAssistantMessage([]messages.ContentBlock{messages.TextBlock(text.String())}, jlModel)
		require.NoError(b, err)
		l.add(session.AssistantMessage{Turn: tt, Step: 2, Message: m, Usage: messages.TokenUsage{InputTokens: 1100, OutputTokens: 40}, HasUsage: true}.Draft())
		l.add(session.StepEnd{Turn: tt, Step: 2}.Draft())
		l.add(session.TurnEnd{Turn: tt, Reason: session.TurnEndReason{Kind: session.EndCompleted}}.Draft())
		batches = append(batches, l.from(start))
	}
	return batches
}

// BenchmarkJSONLAppend appends one batch (one turn, ~70 events) per
// iteration to 1000 sessions in turn, on the real file system, fsync
// included: the cost of durability per batch, with the handle cache
// (256) smaller than the session count.
func BenchmarkJSONLAppend(b *testing.B) {
	const sessions = 1000
	b.Run(fmt.Sprintf("sessions=%d", sessions), func(b *testing.B) {
		ctx := b.Context()
		const turns = 64
		batches := benchBatches(b, turns)
		s := newJSONLOn(b, vfs.OS(), b.TempDir(), JSONLConfig{})
		defer s.Close()
		ids := make([]session.SessionID, sessions)
		for i := range ids {
			ids[i] = session.SessionID(fmt.Sprintf("bench-%04d", i))
			require.NoError(b, s.Create(session.Header{ID: ids[i], CreatedAt: jlNow, Cwd: "/work/proj"}))
			require.NoError(b, s.Append(ctx, ids[i], batches[0], true))
		}
		// A session reaching the last turn starts over as a new session
		// would; the count says where each one is.
		next := make([]int, sessions)
		for i := range next {
			next[i] = 1
		}
		restarted := 0
		events := 0
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			k := i % sessions
			i++
			if next[k] == turns {
				b.StopTimer()
				restarted++
				ids[k] = session.SessionID(fmt.Sprintf("bench-%04d-%d", k, restarted))
				require.NoError(b, s.Create(session.Header{ID: ids[k], CreatedAt: jlNow, Cwd: "/work/proj"}))
				next[k] = 0
				b.StartTimer()
			}
			batch := batches[next[k]]
			if err := s.Append(ctx, ids[k], batch, true); err != nil {
				b.Fatal(err)
			}
			next[k]++
			events += len(batch)
		}
		b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
		b.ReportMetric(float64(events)/float64(b.N), "events/batch")
	})
}

// BenchmarkJSONEncodeOnly encodes the same batches without I/O: the share
// of BenchmarkJSONLAppend that is encoding (packing, JSON, zstd).
func BenchmarkJSONEncodeOnly(b *testing.B) {
	batches := benchBatches(b, 64)
	for _, c := range []struct {
		name string
		zstd bool
	}{{"encoding=plain", false}, {"encoding=zstd", true}} {
		b.Run(c.name, func(b *testing.B) {
			var buf, frame []byte
			events, size := 0, 0
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				batch := batches[i%len(batches)]
				i++
				buf = session.AppendRecords(buf[:0], batch, true)
				n := len(buf)
				if c.zstd {
					frame = session.AppendZstdFrame(frame[:0], buf)
					n = len(frame)
				}
				events += len(batch)
				size += n
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(size)/float64(b.N), "bytes/batch")
		})
	}
}

// An ignorable event typed as a packed-row tag (the SQLite format holds
// one) is refused by a JSONL store, whose reader would take the line for a
// malformed row: the error names the seq and nothing of the batch is
// written.
func TestJSONLRefusesAnEventOnlySQLiteHolds(t *testing.T) {
	ctx := t.Context()
	b := newLogBuilder(t, "session-tag")
	b.textTurn("hello", "hi")
	n := b.len()
	b.add(session.NewDraft("text-chunks", messages.MustParseJSON(`{"note":"foreign"}`)).AsIgnorable())
	b.textTurn("again", "hi again")
	js, err := NewJSONLStore(JSONLConfig{Root: t.TempDir()})
	require.NoError(t, err)
	defer js.Close()
	require.NoError(t, js.Create(b.header()))
	require.NoError(t, js.Append(ctx, b.id(), b.events()[:n], true))
	err = js.Append(ctx, b.id(), b.from(n), true)
	require.ErrorIs(t, err, session.ErrNotJSONL)
	require.ErrorContains(t, err, fmt.Sprintf(`seq %d has type "text-chunks"`, n))
	got, err := js.ReadFrom(ctx, b.id(), 0)
	require.NoError(t, err)
	requireSameEvents(t, b.events()[:n], got)
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
		require.NoError(t, s.Append(ctx, first.id(), first.events(), true))
		project := filepath.Dir(filepath.Dir(s.Locate(first.header())))

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
			wg.Go(func() { errs[i] = s.Append(ctx, bs[i].id(), bs[i].events(), true) })
		}
		synctest.Wait()
		close(release)
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, 2, syncs[project], "one fsync of the project directory running, one for all who waited")
		for _, b := range bs {
			require.Equal(t, 1, syncs[filepath.Dir(s.Locate(b.header()))], "each session directory synced once")
		}
		crashed := newJSONLOn(t, m.CrashClone(), memRoot, cfg)
		defer crashed.Close()
		for _, b := range bs {
			got, err := crashed.Load(ctx, b.id())
			require.NoError(t, err, "a durable first append is durable when it returns")
			jlRequireEvents(t, b.events(), got.Events)
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
				if err := s.Append(ctx, b.id(), b.events()[:k], false); err != nil {
					return err
				}
				return s.Append(ctx, b.id(), b.from(k), true)
			}

			s, m := newMemJSONL(t, cfg)
			require.NoError(t, s.Create(b.header()))
			path := s.Locate(b.header())
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
			require.NoError(t, s.Append(ctx, b.id(), b.events()[:k], false))
			first := len(ops)
			require.NoError(t, s.Append(ctx, b.id(), b.from(k), true))
			m.InjectError(nil)
			require.Equal(t, []string{"open <final>", "write <final>"}, ops[first-2:first], "the first append: no fsync")
			require.Equal(t, []string{"write <final>", "sync <final>", "syncdir " + dir}, ops[first:], "the barrier: the file, then its name")
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
							jlRequireEvents(t, b.events(), got.Events)
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
						jlRequireEvents(t, session.InterruptedTurnClosers(b.events()[:n]), got.Events[n:])
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
				path := s.Locate(b.header())
				require.NoError(t, s.Append(ctx, b.id(), b.events()[:k], false))
				m.InjectError(func(op vfs.Op, p string) error {
					if (op == step && strings.HasPrefix(p, filepath.Dir(path))) || (removeFails && op == vfs.OpRemove) {
						return vfs.ErrInjected
					}
					return nil
				})
				require.ErrorIs(t, s.Append(ctx, b.id(), b.from(k), true), vfs.ErrInjected)
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
				require.ErrorAs(t, s.Append(ctx, b.id(), b.from(k), true), &fe, "nothing is stored: the append starts at seq 0")
				require.NoError(t, s.Append(ctx, b.id(), b.events(), true))
				got, err := newJSONLOn(t, m.CrashClone(), memRoot, JSONLConfig{}).Load(ctx, b.id())
				require.NoError(t, err)
				jlRequireEvents(t, b.events(), got.Events)
			})
		}
	}
}
