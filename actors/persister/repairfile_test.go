package persister

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
	"github.com/stretchr/testify/require"
)

// openToolTurn returns a log whose turn is open after a recorded tool call.
func openToolTurn(t *testing.T) (session.Header, []session.Event) {
	t.Helper()
	h := session.Header{ID: "repair-me", CreatedAt: 1, Cwd: "/w"}
	l, err := session.New(h)
	require.NoError(t, err)
	user, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("go")}, messages.UserSource())
	require.NoError(t, err)
	asst, err := messages.NewAssistantMessage([]messages.ContentBlock{messages.ToolCallBlock("c1", "ls", "{}")},
		messages.ModelSource{Provider: "p", Model: "m"})
	require.NoError(t, err)
	for _, d := range []session.Draft{
		session.UserMessage{Message: user}.Draft(),
		session.TurnStart{Turn: 1}.Draft(),
		session.StepStart{Turn: 1, Step: 1}.Draft(),
		session.AssistantMessage{Turn: 1, Step: 1, Message: asst}.Draft(),
		session.ToolCall{Turn: 1, Step: 1, CallID: "c1", Name: "ls", Arguments: "{}"}.Draft(),
	} {
		_, err := l.Append(d, 7)
		require.NoError(t, err)
	}
	return h, l.Events().Slice()
}

func readBalanced(t *testing.T, path string) *session.File {
	t.Helper()
	f, err := session.ReadFile(path)
	require.NoError(t, err)
	require.Nil(t, f.Torn)
	_, err = f.Log()
	require.NoError(t, err)
	require.NoError(t, session.CheckTrace(f.Events))
	require.Empty(t, session.InterruptedTurnClosers(f.Events), "balanced")
	return f
}

func TestRepairFileCutsTornPlainTailAndClosesTheTurn(t *testing.T) {
	h, events := openToolTurn(t)
	path := filepath.Join(t.TempDir(), "session.jsonl")
	require.NoError(t, session.WriteFile(path, h, events, session.WriteOptions{}))
	clean, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, append(clean, `{"type":"tool/res`...), 0o600))

	r, err := RepairFile(path)
	require.NoError(t, err)
	require.True(t, r.Changed())
	require.NotNil(t, r.Torn)
	require.Equal(t, int64(len(clean)), r.Torn.Offset)
	require.Len(t, r.Closers, 3)
	require.Equal(t, session.TypeToolResult, r.Closers[0].Type())

	f := readBalanced(t, path)
	require.Len(t, f.Events, len(events)+3)
	for i, e := range events {
		require.True(t, e.Equal(f.Events[i]), "event %d kept", i)
	}
	end := f.Events[len(f.Events)-1].Payload().(session.TurnEnd)
	require.Equal(t, session.EndInterrupted, end.Reason.Kind)

	again, err := RepairFile(path)
	require.NoError(t, err)
	require.False(t, again.Changed(), "a repaired file needs nothing more")
}

func TestRepairFileTornZstdFrame(t *testing.T) {
	h, events := openToolTurn(t)
	path := filepath.Join(t.TempDir(), "session.jsonl.zstd")
	require.NoError(t, session.WriteFile(path, h, events, session.WriteOptions{Zstd: true, Pack: session.PackChunks, BatchSizes: []int{3, 2}}))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data[:len(data)-5], 0o600)) // cut the last frame

	r, err := RepairFile(path)
	require.NoError(t, err)
	require.NotNil(t, r.Torn)
	f := readBalanced(t, path)
	require.True(t, f.Compressed)
	kept := len(f.Events) - len(r.Closers)
	require.GreaterOrEqual(t, kept, 3, "the complete first batch survives")
	for i := range kept {
		require.True(t, events[i].Equal(f.Events[i]))
	}
}

func TestRepairFileRefusesCorruption(t *testing.T) {
	h, events := openToolTurn(t)
	path := filepath.Join(t.TempDir(), "session.jsonl")
	require.NoError(t, session.WriteFile(path, h, events, session.WriteOptions{}))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	// A damaged line followed by a committed turn end is corruption.
	bad := append(append([]byte{}, data...), "not json\n"+
		`{"type":"turn/end","seq":6,"time":0,"data":{"turn":1,"reason":{"kind":"completed"}}}`+"\n"...)
	require.NoError(t, os.WriteFile(path, bad, 0o600))

	_, err = RepairFile(path)
	require.Error(t, err)
	require.True(t, IsCorruption(err), "%v", err)
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, bad, after, "a corrupt file is never touched")
}

func TestRepairFileLeavesCleanFilesAlone(t *testing.T) {
	h, events := openToolTurn(t)
	l, err := session.Restore(h, events)
	require.NoError(t, err)
	_, err = l.Repair()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "session.jsonl.zstd")
	require.NoError(t, session.WriteFile(path, h, l.Events().Slice(), session.WriteOptions{Zstd: true}))
	before, err := os.ReadFile(path)
	require.NoError(t, err)
	r, err := RepairFile(path)
	require.NoError(t, err)
	require.False(t, r.Changed())
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after)
}

// A file beside a writer lock is repaired only under that lock: while a
// store holds it, RepairFile refuses (naming the holder) and changes
// nothing; once the store lets the session go, the repair runs.
func TestRepairFileRefusesALockedSession(t *testing.T) {
	ctx := t.Context()
	h, events := openToolTurn(t)
	s, err := NewJSONLStore(JSONLConfig{Root: t.TempDir(), Lock: true, Holder: "the writer"})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Create(h))
	require.NoError(t, s.Append(ctx, h.ID, events, Sync))
	path := s.locate(h)
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	_, err = RepairFile(path)
	var le *LockedError
	require.ErrorAs(t, err, &le)
	require.ErrorIs(t, err, ErrLocked)
	require.Equal(t, "the writer", le.Holder)
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after, "nothing changed")

	require.NoError(t, s.Release(h.ID))
	r, err := RepairFile(path)
	require.NoError(t, err)
	require.Len(t, r.Closers, len(session.InterruptedTurnClosers(events)))
	readBalanced(t, path)
	// The repair let the lock go: the store writes again.
	_, err = s.Load(ctx, h.ID)
	require.NoError(t, err)
}
