package storefs_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/storefs"
	"github.com/dshgo/dsh/internal/vfs"
	"github.com/dshgo/dsh/messages"
)

// A store opened through storefs writes its log into the file system it
// is given, and nothing onto the disk under the same root.
func TestNewJSONLStoreWritesThroughTheGivenFS(t *testing.T) {
	root := filepath.Join(t.TempDir(), "sessions")
	m := vfs.NewMem()
	s, err := storefs.NewJSONLStore(persister.JSONLConfig{Root: root}, m)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })

	l, err := session.New(session.Header{ID: "s1", CreatedAt: 1, Cwd: "/work/proj"})
	require.NoError(t, err)
	msg, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("hi")}, messages.UserSource())
	require.NoError(t, err)
	_, err = l.Append(session.UserMessage{Message: msg}.Draft(), 2)
	require.NoError(t, err)
	require.NoError(t, s.Create(l.Header()))
	require.NoError(t, s.Append(t.Context(), "s1", l.Events().Slice(), persister.Sync))

	entries, err := m.ReadDir(root)
	require.NoError(t, err)
	require.Len(t, entries, 1, "the session's project directory is in the MemFS")
	_, err = os.Stat(root)
	require.ErrorIs(t, err, os.ErrNotExist, "nothing is written to the disk")

	got, err := s.Load(t.Context(), "s1")
	require.NoError(t, err)
	require.Len(t, got.Events, 1)
}
