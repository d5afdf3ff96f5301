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

// TestBenchPacedRuntimeCPU: a paced run reports the runtime's CPU per
// chunk net of the model's at the same pace.
func TestBenchPacedRuntimeCPU(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	err := runBench(ctx, []string{"--sessions", "5", "--turns", "1", "--chunks", "5", "--tokens-per-second", "500",
		"--tool-rate", "0", "--reasoning-rate", "0", "--json", "--quiet"}, &out, &errOut)
	require.NoError(t, err, errOut.String())
	var rep struct {
		CPUPerChunk     float64 `json:"cpu_per_chunk_ns"`
		RuntimePerChunk float64 `json:"runtime_cpu_per_chunk_ns"`
		Baselines       struct {
			Provider float64 `json:"provider_cpu_per_chunk_ns"`
		} `json:"baselines"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	require.Positive(t, rep.Baselines.Provider)
	require.InDelta(t, rep.CPUPerChunk-rep.Baselines.Provider, rep.RuntimePerChunk, 1e-6)
	require.NotZero(t, rep.RuntimePerChunk)
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
