package main

import (
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/session"
)

// counterOf sums the family's counter (or gauge) values and histogram
// counts.
func counterOf(fams map[string]*dto.MetricFamily, name string) float64 {
	var sum float64
	for _, m := range fams[name].GetMetric() {
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}

// dsh serve serves /metrics behind its token: without it 401; with it
// the Prometheus text, which Prometheus' own parser reads, and whose
// turn and chunk counts are those of the session's log after a turn.
func TestServeMetricsBehindTheToken(t *testing.T) {
	dir := t.TempDir()
	tokFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokFile, []byte("tok\n"), 0o600))
	prov, err := synthetic.New(synthetic.Config{Seed: 2, TextChunks: 15})
	require.NoError(t, err)
	url, stop := serveInProcess(t, serveEnv{provider: prov}, "--addr", "127.0.0.1:0", "--dir", dir, "--token-file", tokFile)
	do := func(method, path, body string, auth bool) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, url+path, strings.NewReader(body))
		require.NoError(t, err)
		if auth {
			req.Header.Set("Authorization", "Bearer tok")
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return res
	}
	res := do("GET", "/metrics", "", false)
	res.Body.Close()
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)

	res = do("POST", "/v1/sessions", `{"id":"m1"}`, true)
	res.Body.Close()
	require.Equal(t, http.StatusCreated, res.StatusCode)
	res = do("POST", "/v1/sessions/m1/messages?wait=true", `{"text":"hello"}`, true)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)

	// The turn's events, from the log on disk once the turn is durable.
	var chunks, turns int
	deadline := time.Now().Add(30 * time.Second)
	var fams map[string]*dto.MetricFamily
	for {
		res = do("GET", "/metrics", "", true)
		require.Equal(t, http.StatusOK, res.StatusCode)
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err = p.TextToMetricFamilies(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		if counterOf(fams, "dsh_turn_end_flush_duration_seconds") >= 1 || time.Now().After(deadline) {
			break
		}
	}
	var logs []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), "session.jsonl") {
			logs = append(logs, p)
		}
		return err
	}))
	require.Len(t, logs, 1)
	f, err := session.ReadFile(logs[0])
	require.NoError(t, err)
	for _, ev := range f.Events {
		switch ev.Type() {
		case session.TypeAssistantChunk:
			chunks++
		case session.TypeTurnEnd:
			turns++
		}
	}
	require.Equal(t, 1, turns)
	require.EqualValues(t, turns, counterOf(fams, "dsh_turns_ended_total"))
	require.EqualValues(t, chunks, counterOf(fams, "dsh_model_chunks_total"))
	require.EqualValues(t, 1, counterOf(fams, "dsh_turn_end_flush_duration_seconds"))
	require.EqualValues(t, 1, counterOf(fams, "dsh_sessions_resident"))
	stop()
	http.DefaultClient.CloseIdleConnections()
}

// The error dsh run prints as its one line is not logged a second time:
// the host's warning of the same write failure is held and dropped, so
// the failure is named once on stderr; --log-format json is accepted and
// a bad --log-level is bad usage.
func TestRunFailureIsNotLoggedTwice(t *testing.T) {
	fsys := newFullDisk()
	fsys.full.Store(true)
	env := slowModel(t, 5, 0)
	env.fs = fsys
	cmdTalkEnv = env
	t.Cleanup(func() { cmdTalkEnv = talkEnv{} })
	code, _, errOut := runDsh("run", "--dir", t.TempDir(), "--workdir", t.TempDir(), "--log-format", "json", "hello")
	require.Equal(t, exitFailure, code, errOut)
	require.Equal(t, 1, strings.Count(errOut, syscall.ENOSPC.Error()), errOut)
	require.Contains(t, errOut, "dsh: run: turn 1's end could not be written: ")

	code, _, errOut = runDsh("run", "--log-level", "loud", "hello")
	require.Equal(t, exitUsage, code, errOut)
}

// dsh bench --actor-metrics adds protoactor's own per-actor metrics to
// what --metrics-out writes (protoactor takes its instruments from the
// global meter provider); without the flag there are none.
func TestBenchActorMetrics(t *testing.T) {
	count := func(args ...string) int {
		t.Helper()
		out := filepath.Join(t.TempDir(), "metrics.txt")
		code, _, errOut := runDsh(append([]string{"bench", "--quiet", "--sessions", "2", "--turns", "1", "--chunks", "5",
			"--no-baselines", "--no-verify", "--metrics-out", out}, args...)...)
		require.Equal(t, exitOK, code, errOut)
		data, err := os.ReadFile(out)
		require.NoError(t, err)
		require.Contains(t, string(data), "dsh_turns_ended_total")
		n := 0
		for _, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(l, "protoactor_actor_") {
				n++
			}
		}
		return n
	}
	require.Zero(t, count())
	require.NotZero(t, count("--actor-metrics"))
	code, _, errOut := runDsh("bench", "--quiet", "--sessions", "2", "--cluster", "2", "--actor-metrics", "--metrics-out", filepath.Join(t.TempDir(), "m"))
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "no System with Cluster")
}
