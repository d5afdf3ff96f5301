package persister

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"

	"github.com/dshgo/dsh/internal/vfs"
)

// TestActorPassesTheStoreErrorOnOnce: the store's append error names the
// append and the session; the persister reports it as it is, not wrapped
// in the same words again.
func TestActorPassesTheStoreErrorOnOnce(t *testing.T) {
	store := NewMemStore()
	r := newRig(t, Config{Store: store, Window: hourWindow})
	id := r.track("s-fail")
	r.append(id, wbUserDrafts(1)...)
	store.failNext(errWriteDisk)
	ff, ok := r.flush(id).(FlushFailed)
	require.Truef(t, ok, "want FlushFailed")
	require.ErrorIs(t, ff.Err, errWriteDisk)
	require.Equal(t, "persister: append s-fail: disk on fire", ff.Err.Error())
}

// TestJSONLFailedWriteAndTruncateBackIsOneLine: when the write and then
// the truncation back both fail, the error says both on one line.
func TestJSONLFailedWriteAndTruncateBackIsOneLine(t *testing.T) {
	ctx := t.Context()
	s, m := newMemJSONL(t, JSONLConfig{})
	b, k, path := twoTurnsFirstStored(t, s, "dirty")
	size := len(readRaw(t, m, path))
	m.InjectError(func(op vfs.Op, p string) error {
		if p == path && (op == vfs.OpSync || op == vfs.OpTruncate) {
			return vfs.ErrInjected
		}
		return nil
	})
	err := s.Append(ctx, b.id(), b.from(k), Sync)
	m.InjectError(nil)
	require.ErrorIs(t, err, vfs.ErrInjected)
	require.NotContains(t, err.Error(), "\n")
	require.Equal(t, fmt.Sprintf("persister: append dirty: sync %s: vfs: injected error; then truncate back to %d: truncate %s: vfs: injected error",
		path, size, path), err.Error())
}

// TestJSONLLoadOfAnEmptyArtifactNamesThePathOnce: an artifact without a
// header is corruption, and the error names its path once.
func TestJSONLLoadOfAnEmptyArtifactNamesThePathOnce(t *testing.T) {
	ctx := t.Context()
	s, m := newMemJSONL(t, JSONLConfig{})
	b := newJL(t, "emptied")
	b.textTurn("one", 2)
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))
	path := s.locate(b.header())
	f, err := m.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = s.Load(ctx, b.id())
	require.True(t, IsCorruption(err), "%v", err)
	require.ErrorIs(t, err, session.ErrNoHeader)
	require.Equal(t, "persister: load emptied: session: "+path+": line 1: log has no complete header line", err.Error())
}

// TestJSONLOpenErrorsNameTheRootOnce: a root that is not a directory, or
// that holds another layout, is refused with "persister: " once and the
// root named once.
func TestJSONLOpenErrorsNameTheRootOnce(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err := NewJSONLStore(JSONLConfig{Root: file})
	require.ErrorIs(t, err, syscall.ENOTDIR)
	require.Equal(t, "persister: open store: open "+file+": not a directory", err.Error())

	flat := filepath.Join(dir, "flat")
	require.NoError(t, os.MkdirAll(filepath.Join(flat, "proj"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(flat, "proj", "x.jsonl"), nil, 0o600))
	_, err = NewJSONLStore(JSONLConfig{Root: flat})
	require.ErrorIs(t, err, ErrLayout)
	require.Equal(t, "persister: open "+flat+": root holds another layout: "+filepath.Join(flat, "proj", "x.jsonl")+
		" is in the obsolete flat layout <project>/<id>.jsonl", err.Error())
}
