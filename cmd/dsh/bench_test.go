package main

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBenchJSONIsOneValue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	err := runBench(ctx, []string{"--sessions", "10", "--turns", "2", "--chunks", "10", "--json"}, &out, &errOut)
	require.NoError(t, err, errOut.String())
	dec := json.NewDecoder(&out)
	var rep map[string]any
	require.NoError(t, dec.Decode(&rep))
	require.False(t, dec.More(), "exactly one JSON value")
	require.EqualValues(t, 20, rep["turns"])
	require.EqualValues(t, 10, rep["files_verified"])
	for _, k := range []string{"open_fds", "peak_open_fds", "fds_per_resident_session"} {
		require.Contains(t, rep, k)
	}
}

func TestBenchTableAndUsage(t *testing.T) {
	code, out, errOut := runDsh("bench", "--sessions", "5", "--turns", "1", "--chunks", "5", "--policy", "none", "--quiet")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "chunks")
	require.Contains(t, out, "turn-end flush")
	if runtime.GOOS == "linux" {
		require.Contains(t, out, "open files")
	}
	require.Empty(t, errOut)
	code, _, _ = runDsh("bench", "--policy", "sometimes")
	require.Equal(t, exitUsage, code)
	code, out, _ = runDsh("bench", "--help")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "-sessions")
}
