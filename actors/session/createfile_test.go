package session

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCreateFileWritesANewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new.jsonl.zstd")
	events := fileEvents(t, fileSession())
	require.NoError(t, CreateFile(path, fileHeader, events, WriteOptions{Zstd: true, Pack: PackChunks}))
	f, err := ReadFile(path)
	require.NoError(t, err)
	require.Len(t, f.Events, len(events))
	info, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
}

func TestCreateFileNeverFollowsOrReplaces(t *testing.T) {
	dir := t.TempDir()
	events := fileEvents(t, fileSession())

	target := filepath.Join(dir, "target.jsonl")
	dangling := filepath.Join(dir, "dangling.jsonl")
	require.NoError(t, os.Symlink(target, dangling))
	require.ErrorIs(t, CreateFile(dangling, fileHeader, events, WriteOptions{}), ErrFileExists)
	_, err := os.Lstat(target)
	require.ErrorIs(t, err, os.ErrNotExist, "the link's target is not created")

	existing := filepath.Join(dir, "existing.jsonl")
	require.NoError(t, os.WriteFile(existing, []byte("keep\n"), 0o600))
	require.ErrorIs(t, CreateFile(existing, fileHeader, events, WriteOptions{}), ErrFileExists)
	data, err := os.ReadFile(existing)
	require.NoError(t, err)
	require.Equal(t, "keep\n", string(data))
}

func TestCreateFileLeavesNothingOnAnEncodingError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.jsonl")
	events := fileEvents(t, fileSession())
	require.Error(t, CreateFile(path, fileHeader, events[1:], WriteOptions{}))
	_, err := os.Lstat(path)
	require.ErrorIs(t, err, os.ErrNotExist)
}
