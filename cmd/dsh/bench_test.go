package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
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

// TestBenchCapacitySmall: a small real capacity search (two sessions to
// start, a tiny pace) ends with one JSON value whose capacity is a count
// that held, and its steps follow the ramp from the start count; progress
// is one line per step on stderr.
func TestBenchCapacitySmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	err := runBench(ctx, []string{"--capacity", "--sessions", "2", "--chunks", "4", "--tokens-per-second", "400",
		"--capacity-timeout", "3s", "--memory-budget", "8GiB", "--json"}, &out, &errOut)
	require.NoError(t, err, errOut.String())
	dec := json.NewDecoder(&out)
	var rep struct {
		Capacity *int    `json:"capacity_sessions"`
		Budget   uint64  `json:"memory_budget_bytes"`
		TPS      float64 `json:"tokens_per_second"`
		Steps    []struct {
			Sessions int  `json:"sessions"`
			Held     bool `json:"held"`
		} `json:"steps"`
		At *struct {
			Sessions int     `json:"sessions"`
			CPU      float64 `json:"cpu_cores_per_session"`
		} `json:"at"`
	}
	require.NoError(t, dec.Decode(&rep))
	require.False(t, dec.More(), "exactly one JSON value")
	require.NotNil(t, rep.Capacity)
	require.EqualValues(t, 8<<30, rep.Budget)
	require.EqualValues(t, 400, rep.TPS)
	require.NotEmpty(t, rep.Steps)
	require.Equal(t, 2, rep.Steps[0].Sessions, "the search starts at --sessions")
	best := 0
	for _, s := range rep.Steps {
		if s.Held {
			best = max(best, s.Sessions)
		}
	}
	require.Equal(t, best, *rep.Capacity, "the largest count that held")
	if best > 0 {
		require.NotNil(t, rep.At)
		require.Equal(t, best, rep.At.Sessions)
		require.Positive(t, rep.At.CPU)
	}
	require.Equal(t, len(rep.Steps), strings.Count(errOut.String(), "capacity: "), errOut.String())
}

func TestBenchCapacityUsage(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--memory-budget", "1GiB"},
		{"bench", "--capacity", "--memory-budget", "lots"},
		{"bench", "--capacity", "--memory-budget", "0"},
		{"bench", "--capacity", "--capacity-timeout", "-1s"},
		{"bench", "--capacity", "--cpuprofile", "x.prof"},
	} {
		code, _, errOut := runDsh(args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
		require.True(t, strings.HasPrefix(errOut, "dsh: bench: --"), "%v: %s", args, errOut)
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]uint64{"1": 1, "2K": 2 << 10, "3KiB": 3 << 10, "4M": 4 << 20, "5MiB": 5 << 20, "6G": 6 << 30, "7GiB": 7 << 30} {
		got, err := parseBytes(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "0", "-1", "1.5G", "GiB", "99999999999999999999", "17179869184G"} {
		_, err := parseBytes(in)
		require.Error(t, err, in)
	}
}

// TestBenchCapacityInterrupted: a capacity search whose context is
// cancelled (Ctrl-C) ends with the one line that says so.
func TestBenchCapacityInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	err := runBench(ctx, []string{"--capacity", "--sessions", "2", "--chunks", "4", "--memory-budget", "1GiB", "--quiet"}, &out, &errOut)
	require.EqualError(t, err, "bench: interrupted")
	require.Empty(t, out.String())
}

// TestBenchCapacityDirKeepsEachStep: with --dir, each step writes its
// sessions to a directory of its own under it (the same session ids in one
// directory would collide), and keeps them.
func TestBenchCapacityDirKeepsEachStep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	err := runBench(ctx, []string{"--capacity", "--dir", dir, "--sessions", "2", "--chunks", "2", "--tokens-per-second", "400",
		"--capacity-timeout", "5s", "--memory-budget", "8GiB", "--json", "--quiet"}, &out, &errOut)
	require.NoError(t, err, errOut.String())
	var rep struct {
		Steps []struct {
			Sessions int `json:"sessions"`
		} `json:"steps"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	require.GreaterOrEqual(t, len(rep.Steps), 2, "from 2 sessions: a step at 1 or at 4 follows")
	for i, s := range rep.Steps {
		logs, err := filepath.Glob(filepath.Join(dir, fmt.Sprintf("step%02d-%d", i+1, s.Sessions), "*", "*", "session.jsonl*"))
		require.NoError(t, err)
		require.Len(t, logs, s.Sessions, "step %d", i+1)
	}
}
