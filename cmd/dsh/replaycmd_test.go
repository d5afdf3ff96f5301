package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if code, ok := cliMain(); ok {
		os.Exit(code)
	}
	// Every flag reads DSH_<NAME>: the developer's environment stays out
	// of the tests (the processes they start inherit the cleaned one).
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "DSH_") {
			_ = os.Unsetenv(k)
		}
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		removeBuilt()
		os.Exit(code)
	}))
}

func TestReplayPrintsConformant(t *testing.T) {
	// tool-call-turn, plus scenarios with a second tool step in one turn
	// and with a tool's additional contexts.
	for _, s := range []string{"tool-call-turn", "advanced-toolchain", "hook-codex-posttool-context"} {
		path := filepath.Join(mustCorpus(t), "acp", s, "session.jsonl")
		code, out, errOut := runDsh("log", "replay", "--fixture", path)
		require.Equal(t, exitOK, code, "%s: %s", s, errOut)
		require.Equal(t, "conformant\n", out, s)
		require.Empty(t, errOut, s)
	}
}

func TestReplayPrintsTheFirstDivergence(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(mustCorpus(t), "acp", "text-turn", "session.jsonl"))
	require.NoError(t, err)
	old := []byte(`"reason":{"kind":"completed"}`)
	require.Equal(t, 1, bytes.Count(data, old))
	path := filepath.Join(t.TempDir(), "session.jsonl")
	require.NoError(t, os.WriteFile(path, bytes.Replace(data, old, []byte(`"reason":{"kind":"max-tokens"}`), 1), 0o600))
	code, out, errOut := runDsh("log", "replay", "--fixture", path)
	require.Equal(t, exitFailure, code)
	require.Empty(t, errOut)
	require.Contains(t, out, "diverged at position 39\n")
	require.Contains(t, out, `expected: turn/end {"turn":1,"reason":{"kind":"max-tokens"}}`)
	require.Contains(t, out, `got:      turn/end {"turn":1,"reason":{"kind":"completed"}}`)
}

func TestReplayUsage(t *testing.T) {
	code, _, errOut := runDsh("log", "replay")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "want exactly one file")
	code, _, _ = runDsh("log", "replay", "a.jsonl", "b.jsonl")
	require.Equal(t, exitUsage, code)
	code, out, _ := runDsh("log", "replay", "--help")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "Usage: dsh log replay")
	code, _, errOut = runDsh("log", "replay", filepath.Join(t.TempDir(), "missing.jsonl"))
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "no such file")
}

func TestReplayHintsAtFixturePlaceholders(t *testing.T) {
	path := filepath.Join(mustCorpus(t), "acp", "text-turn", "session.jsonl")
	code, _, errOut := runDsh("log", "replay", path)
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "try --fixture")
}
