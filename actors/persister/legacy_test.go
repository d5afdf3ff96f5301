package persister

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/vfs"
)

// TestLegacyLogLoadsUpgradedAndIsNotRewritten: a stored log with older
// shapes loads upgraded (docs/log-format.md, "Older shapes"); appending to
// the session writes only the new batch after the older lines, which stay
// byte for byte as they were, and the log reloads the same.
func TestLegacyLogLoadsUpgradedAndIsNotRewritten(t *testing.T) {
	root := t.TempDir()
	s := newJSONLOn(t, vfs.OS(), root, JSONLConfig{Plain: true, Lock: true})
	defer s.Close()
	h := session.Header{ID: "s-old", CreatedAt: 1, Cwd: "/work/proj"}
	legacy := strings.Join([]string{
		`{"type":"session","version":0,"id":"s-old","createdAt":1,"cwd":"/work/proj","delegationDepth":0}`,
		`{"type":"turn/start","seq":0,"time":1,"data":{"turn":1,"trigger":{"kind":"message"}}}`,
		`{"type":"step/start","seq":1,"time":1,"data":{"turn":1,"step":1}}`,
		`{"type":"steering/message","seq":2,"time":1,"data":{"turn":1,"content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}}`,
		`{"type":"step/end","seq":3,"time":1,"data":{"turn":1,"step":1}}`,
		`{"type":"turn/end","seq":4,"time":1,"data":{"turn":1,"reason":{"kind":"aborted"}}}`,
	}, "\n") + "\n"
	path := s.locate(h)
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	require.NoError(t, os.WriteFile(path, []byte(legacy), 0o600))

	st, err := s.Load(t.Context(), h.ID)
	require.NoError(t, err)
	require.Len(t, st.Events, 5)
	m, ok := st.Events[2].Message()
	require.True(t, ok)
	require.Equal(t, session.TypeUserMessage, st.Events[2].Type())
	require.EqualValues(t, "legacy-message:s-old:2", m.ID())
	end := st.Events[4].Payload().(session.TurnEnd)
	require.Equal(t, session.CauseLegacy, end.Reason.Cause.Kind)

	l, err := session.Restore(st.Header, st.Events)
	require.NoError(t, err)
	e, err := l.Append(session.TurnStart{Turn: 2}.Draft(), 2)
	require.NoError(t, err)
	require.NoError(t, s.Append(t.Context(), h.ID, []session.Event{e}, Sync))

	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(raw), legacy), "the older lines are kept as written")
	require.Equal(t, strings.Count(legacy, "\n")+1, strings.Count(string(raw), "\n"), "one new line")

	s2 := newJSONLOn(t, vfs.OS(), root, JSONLConfig{Plain: true})
	defer s2.Close()
	again, err := s2.Inspect(t.Context(), h.ID)
	require.NoError(t, err)
	require.Len(t, again.Events, 7, "the six stored, and the closer Inspect adds in memory for turn 2")
	for i := range st.Events {
		require.True(t, st.Events[i].Equal(again.Events[i]), "event %d", i)
	}
}

// TestSQLiteLegacyRowsMigrateOnRead: rows of older shapes in a SQLite
// database (a reference that wrote them before its format changed) load
// upgraded to exactly the events the JSONL store reads from the same
// records, from every seq (a replacing tool result read past its start
// node takes that node's message id all the same), and the session takes
// appends after them: the tail check migrates them too.
func TestSQLiteLegacyRowsMigrateOnRead(t *testing.T) {
	ctx := t.Context()
	h := session.Header{ID: "s-old", CreatedAt: 1, Cwd: "/work/proj"}
	current := []string{
		`{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}`,
		`{"type":"step/start","seq":1,"time":1,"data":{"turn":1,"step":1}}`,
	}
	legacy := []string{
		`{"type":"steering/message","seq":2,"time":1,"data":{"turn":1,"content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}}`,
		`{"type":"assistant/message","seq":3,"time":1,"data":{"turn":1,"step":1,"content":[{"type":"tool-call","id":"c1","name":"read","arguments":"{}"}],"provenance":{"provider":"p","model":"m"}},"surfaceOp":"append","sourceEventSeqs":[]}`,
		`{"type":"tool/call","seq":4,"time":1,"data":{"turn":1,"step":1,"callId":"c1","name":"read","arguments":"{}"}}`,
		`{"type":"tool/result","seq":5,"time":1,"data":{"turn":1,"step":1,"callId":"c1","content":[{"type":"text","text":"a long output"}],"isError":false},"surfaceOp":"append","sourceEventSeqs":[4]}`,
		`{"type":"step/end","seq":6,"time":1,"data":{"turn":1,"step":1}}`,
		`{"type":"compaction/prune","seq":7,"time":1,"data":{"shadowedRange":{"start":5,"end":5},"shadowedSeqs":[5],"shadowedTokenCount":3}}`,
		`{"type":"tool/result","seq":8,"time":2,"data":{"turn":1,"step":1,"callId":"c1","content":[{"type":"text","text":"[pruned]"}],"isError":false},"surfaceOp":{"op":"replace","start":5,"end":5},"sourceEventSeqs":[5,7]}`,
		`{"type":"turn/end","seq":9,"time":2,"data":{"turn":1,"reason":{"kind":"aborted"}}}`,
	}

	// What the JSONL store reads from these records.
	js := newJSONLOn(t, vfs.OS(), t.TempDir(), JSONLConfig{Plain: true})
	defer js.Close()
	path := js.locate(h)
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	file := `{"type":"session","version":0,"id":"s-old","createdAt":1,"cwd":"/work/proj","delegationDepth":0}` + "\n" +
		strings.Join(append(append([]string{}, current...), legacy...), "\n") + "\n"
	require.NoError(t, os.WriteFile(path, []byte(file), 0o600))
	want, err := js.Inspect(ctx, h.ID)
	require.NoError(t, err)
	require.Len(t, want.Events, 10)
	require.Empty(t, want.Closers)

	// The same records as SQLite rows: the current ones appended, the
	// older ones planted as the reference wrote them.
	dbPath := filepath.Join(t.TempDir(), "s.sqlite")
	s := openTestSQLite(t, dbPath, SQLiteOptions{})
	defer s.Close()
	require.NoError(t, s.Create(h))
	require.NoError(t, s.Append(ctx, h.ID, want.Events[:2], Sync))
	db := rawDB(t, dbPath)
	for _, line := range legacy {
		var rec struct {
			Type      string          `json:"type"`
			Seq       int64           `json:"seq"`
			Time      int64           `json:"time"`
			Data      json.RawMessage `json:"data"`
			SurfaceOp json.RawMessage `json:"surfaceOp"`
			Sources   []int64         `json:"sourceEventSeqs"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		var op, src any
		if rec.SurfaceOp != nil {
			op = string(rec.SurfaceOp)
		}
		if rec.Sources != nil {
			b, err := appendSources([]byte{}, rec.Sources)
			require.NoError(t, err)
			src = b
		}
		mustExec(t, db, `INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable) VALUES (?, ?, ?, ?, ?, ?, ?, NULL)`,
			string(h.ID), rec.Seq, rec.Type, rec.Time, string(rec.Data), src, op)
	}
	mustExec(t, db, `UPDATE sessions SET revision = revision + 1 WHERE id = ?`, string(h.ID))

	got, err := s.Load(ctx, h.ID)
	require.NoError(t, err)
	requireSameEvents(t, want.Events, got.Events)
	m, ok := got.Events[8].Message()
	require.True(t, ok)
	first, _ := got.Events[5].Message()
	require.Equal(t, first.ID(), m.ID(), "the replacing result keeps its start node's id")
	for from := range int64(11) {
		suffix, err := s.ReadFrom(ctx, h.ID, from)
		require.NoError(t, err, "from %d", from)
		requireSameEvents(t, want.Events[min(from, 10):], suffix)
	}

	l, err := session.Restore(got.Header, got.Events)
	require.NoError(t, err)
	e, err := l.Append(session.TurnStart{Turn: 2}.Draft(), 3)
	require.NoError(t, err)
	require.NoError(t, s.Append(ctx, h.ID, []session.Event{e}, Sync))
	again, err := s.Inspect(ctx, h.ID)
	require.NoError(t, err)
	requireSameEvents(t, append(slices.Clone(want.Events), e), again.Events[:11])
}
