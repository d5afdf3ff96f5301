package persister

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/internal/vfs"
)

// TestSupersededSessionIsNotOpened: a session directory holding both the
// format-0 log and a newer format's log beside it (what a newer reference
// leaves after migrating) is refused for load, append and repair, with one
// error naming the newer file; the old file is left as it was; List still
// lists the session, saying which newer file supersedes it.
func TestSupersededSessionIsNotOpened(t *testing.T) {
	for _, enc := range encodings {
		for _, newer := range []string{"session.v2.jsonl", "session.v4.jsonl.zstd"} {
			t.Run(enc.name+"/"+newer, func(t *testing.T) {
				root := t.TempDir()
				s1 := newJSONLOn(t, vfs.OS(), root, JSONLConfig{Plain: enc.plain, Lock: true})
				b, k, path := twoTurnsFirstStored(t, s1, "sup")
				require.NoError(t, s1.Close())
				newPath := filepath.Join(filepath.Dir(path), newer)
				require.NoError(t, os.WriteFile(newPath, []byte(`{"type":"session","version":2}`+"\n"), 0o600))
				before, err := os.ReadFile(path)
				require.NoError(t, err)

				s2 := newJSONLOn(t, vfs.OS(), root, JSONLConfig{Plain: enc.plain, Lock: true})
				defer s2.Close()
				_, err = s2.Load(t.Context(), b.id())
				require.ErrorIs(t, err, ErrSuperseded)
				require.ErrorContains(t, err, newPath)
				require.ErrorContains(t, err, "this build reads format 0 only")
				err = s2.Append(t.Context(), b.id(), b.from(k), Sync)
				require.ErrorIs(t, err, ErrSuperseded)
				_, err = RepairFile(path)
				require.ErrorIs(t, err, ErrSuperseded)
				after, err := os.ReadFile(path)
				require.NoError(t, err)
				require.Equal(t, before, after, "the old file is untouched")

				listed, err := s2.List(t.Context())
				require.NoError(t, err)
				require.Len(t, listed, 1)
				require.Equal(t, newPath, listed[0].Superseded)
			})
		}
	}
}

// TestNewerVersionNames: only session.vN.jsonl[.zstd] with N >= 1 is a
// newer format's log; the newest one is named.
func TestNewerVersionNames(t *testing.T) {
	for name, want := range map[string]int64{
		"session.v1.jsonl": 1, "session.v2.jsonl.zstd": 2, "session.v10.jsonl": 10,
		"session.v0.jsonl": 0, "session.v.jsonl": 0, "session.vx.jsonl": 0, "session.v2.json": 0,
		"session.v2.jsonl.tmp": 0, "session.jsonl": 0, "session.v-1.jsonl": 0, "session.v2.jsonl.zstd.1a2b.tmp": 0,
		"session.v99999999999999999999.jsonl": 0,
	} {
		n, ok := newerVersion(name)
		require.Equal(t, want != 0, ok, name)
		require.Equal(t, want, n, name)
	}
	dir := t.TempDir()
	for _, n := range []string{"session.jsonl", "session.v2.jsonl", "session.v3.jsonl.zstd", "session.v0.jsonl"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, n), nil, 0o600))
	}
	err := Superseded(filepath.Join(dir, "session.jsonl"))
	var se *SupersededError
	require.ErrorAs(t, err, &se)
	require.Equal(t, filepath.Join(dir, "session.v3.jsonl.zstd"), se.Newer)
	require.EqualValues(t, 3, se.Version)
	require.NoError(t, Superseded(filepath.Join(t.TempDir(), "session.jsonl")))
}
