package persister

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/testutil"
	"github.com/dshgo/dsh/internal/vfs"
)

// writeBomb puts at h's place in s a log of a few kilobytes: h's header
// frame, then a frame of 100 MiB of newlines. It returns the path and the
// length of the header frame.
func writeBomb(t *testing.T, s *JSONLStore, h session.Header) (string, int64) {
	t.Helper()
	header := []byte(h.JSON().String())
	data := testutil.ZstdNewlineBomb(header, 100<<20)
	head := testutil.ZstdFrame(testutil.Repeat{Text: append(header, '\n'), N: 1})
	require.Equal(t, head, data[:len(head)])
	path := s.locate(h)
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path, int64(len(head))
}

// TestLoadNewlineBombIsBounded: a store loading a session whose log is a
// zstd newline bomb (3 KB on disk, 100 MiB decompressed) allocates a few
// MiB, not gigabytes, and finds a header with a torn tail at the second
// frame, which the load's repair cuts: what loading a crashed log does.
// So does `dsh log repair` (RepairFile).
func TestLoadNewlineBombIsBounded(t *testing.T) {
	s := newJSONLOn(t, vfs.OS(), t.TempDir(), JSONLConfig{})
	t.Cleanup(func() { _ = s.Close() })
	h := session.Header{ID: "bomb", CreatedAt: 1, Cwd: "/w"}
	path, head := writeBomb(t, s, h)

	var got Stored
	var err error
	n := testutil.Allocated(func() { got, err = s.Load(t.Context(), h.ID) })
	require.Less(t, n, uint64(32<<20), "Load allocated %d MiB", n>>20)
	require.NoError(t, err)
	require.Equal(t, h, got.Header)
	require.Empty(t, got.Events)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, head, fi.Size(), "the torn tail is cut")

	path, head = writeBomb(t, s, session.Header{ID: "bomb2", CreatedAt: 1, Cwd: "/w"})
	var r RepairReport
	n = testutil.Allocated(func() { r, err = RepairFile(path) })
	require.Less(t, n, uint64(32<<20), "RepairFile allocated %d MiB", n>>20)
	require.NoError(t, err)
	require.Equal(t, head, r.SizeAfter)
	require.Greater(t, r.SizeBefore, head)
}

// TestLoadRefusesRecordOverLimit: JSONLConfig.MaxRecordBytes bounds one
// line of a log loaded; a longer one makes the log corrupt, with an error
// naming the limit, and the file is left as it is.
func TestLoadRefusesRecordOverLimit(t *testing.T) {
	s := newJSONLOn(t, vfs.OS(), t.TempDir(), JSONLConfig{Plain: true, MaxRecordBytes: 1 << 10})
	t.Cleanup(func() { _ = s.Close() })
	h := session.Header{ID: "long", CreatedAt: 1, Cwd: "/w"}
	path := s.locate(h)
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	long := `{"type":"x/blob","seq":0,"time":0,"ignorable":true,"data":"` + strings.Repeat("a", 2<<10) + `"}`
	data := []byte(h.JSON().String() + "\n" + long + "\n")
	require.NoError(t, os.WriteFile(path, data, 0o600))

	_, err := s.Load(t.Context(), h.ID)
	require.True(t, IsCorruption(err), "want corruption, got %v", err)
	var tl *session.RecordTooLargeError
	require.True(t, errors.As(err, &tl), "want a *session.RecordTooLargeError, got %v", err)
	require.Equal(t, 1<<10, tl.Limit)
	require.Contains(t, err.Error(), "limit of 1024 bytes")
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, data, after)

	require.Error(t, JSONLConfig{Root: "x", MaxRecordBytes: -1}.validate())
}
