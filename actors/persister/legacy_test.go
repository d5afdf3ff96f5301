package persister

import (
	"os"
	"path/filepath"
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
	path := s.Locate(h)
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
	require.NoError(t, s.Append(t.Context(), h.ID, []session.Event{e}, true))

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
