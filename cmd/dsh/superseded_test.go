package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSupersededSessionRefused: a session directory that holds both
// session.jsonl.zstd and the session.v2.jsonl a newer reference migrated
// it to: dsh run --session, log repair and log fork refuse it with one
// line naming the newer file; log verify of the old file says it is
// superseded; dsh sessions lists it as "newer format". The old file is
// left as it was.
func TestSupersededSessionRefused(t *testing.T) {
	t.Setenv("DEEPSEEK_API_KEY", "")
	dir, wd := t.TempDir(), t.TempDir()
	code, _, errOut := runDsh("run", "--dir", dir, "--workdir", wd, "hello")
	require.Equal(t, 0, code, errOut)
	id := sessionFrom(t, errOut)
	olds, err := filepath.Glob(filepath.Join(dir, "*", id, "session.jsonl.zstd"))
	require.NoError(t, err)
	require.Len(t, olds, 1)
	old := olds[0]
	newer := filepath.Join(filepath.Dir(old), "session.v2.jsonl")
	require.NoError(t, os.WriteFile(newer, []byte(`{"type":"session","version":2}`+"\n"), 0o600))
	before, err := os.ReadFile(old)
	require.NoError(t, err)

	oneLine := func(errOut string) {
		t.Helper()
		require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
		require.Contains(t, errOut, newer)
		require.Contains(t, errOut, "format 0")
	}
	code, _, errOut = runDsh("run", "--dir", dir, "--workdir", wd, "--session", id, "again")
	require.Equal(t, 1, code)
	oneLine(errOut)
	code, _, errOut = runDsh("log", "repair", old)
	require.Equal(t, 1, code)
	oneLine(errOut)
	code, _, errOut = runDsh("log", "fork", "--out", filepath.Join(t.TempDir(), "child.jsonl"), old)
	require.Equal(t, 1, code)
	oneLine(errOut)

	code, out, errOut := runDsh("log", "verify", old)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "superseded by "+newer)

	code, out, errOut = runDsh("sessions", "--dir", dir)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "newer format: "+newer)
	code, out, _ = runDsh("sessions", "--dir", dir, "--json")
	require.Equal(t, 0, code)
	var rows []sessionRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 1)
	require.Equal(t, newer, rows[0].Superseded)

	after, err := os.ReadFile(old)
	require.NoError(t, err)
	require.Equal(t, before, after)
}
