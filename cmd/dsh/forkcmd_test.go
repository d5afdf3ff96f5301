package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// forkableCorpusLog is a corpus log whose last event closes a turn, so a
// fork at the default seq succeeds.
func forkableCorpusLog(t *testing.T) string {
	t.Helper()
	return filepath.Join(mustCorpus(t), "acp", "multi-turn", "session.jsonl")
}

func TestForkRefusesADanglingSymlinkAtOut(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere", "planted.jsonl")
	require.NoError(t, os.Mkdir(filepath.Dir(target), 0o700))
	out := filepath.Join(dir, "child.jsonl")
	require.NoError(t, os.Symlink(target, out))

	code, stdout, errOut := runDsh("log", "fork", "--fixture", "--out", out, forkableCorpusLog(t))
	require.Equal(t, exitFailure, code, stdout)
	require.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
	require.Contains(t, errOut, "already exists")
	_, err := os.Lstat(target)
	require.ErrorIs(t, err, os.ErrNotExist, "the link's target must not be created")
	link, err := os.Readlink(out)
	require.NoError(t, err, "the link is left as it was")
	require.Equal(t, target, link)
}

func TestForkRefusesAnExistingFileAtOut(t *testing.T) {
	out := filepath.Join(t.TempDir(), "child.jsonl")
	require.NoError(t, os.WriteFile(out, []byte("precious\n"), 0o600))

	code, _, errOut := runDsh("log", "fork", "--fixture", "--out", out, forkableCorpusLog(t))
	require.Equal(t, exitFailure, code)
	require.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
	require.Contains(t, errOut, "already exists")
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, "precious\n", string(data), "the file is unchanged")
}
