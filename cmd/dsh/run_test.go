package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/internal/vfs"
)

// notifyBuffer is a concurrency-safe buffer that signals its first write.
type notifyBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	first chan struct{}
	once  sync.Once
}

func newNotifyBuffer() *notifyBuffer { return &notifyBuffer{first: make(chan struct{})} }

func (n *notifyBuffer) Write(p []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(p) > 0 {
		n.once.Do(func() { close(n.first) })
	}
	return n.b.Write(p)
}

func (n *notifyBuffer) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.b.String()
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// slowModel streams long answers slowly enough to interrupt them.
func slowModel(t *testing.T, chunks int, tps float64) talkEnv {
	p, err := synthetic.New(synthetic.Config{Seed: 3, TextChunks: chunks, TokensPerSecond: tps})
	require.NoError(t, err)
	return talkEnv{provider: p}
}

func sessionFrom(t *testing.T, stderr string) string {
	t.Helper()
	for _, l := range strings.Split(stderr, "\n") {
		if id, ok := strings.CutPrefix(l, "session "); ok && !strings.Contains(id, " ") {
			return id
		}
	}
	t.Fatalf("no session id in %q", stderr)
	return ""
}

func TestRunStreamsThenResumesWithJSON(t *testing.T) {
	t.Setenv("DEEPSEEK_API_KEY", "")
	dir, wd := t.TempDir(), t.TempDir()
	code, out, errOut := runDsh("run", "--dir", dir, "--workdir", wd, "hello")
	require.Equal(t, 0, code, errOut)
	require.NotEmpty(t, strings.TrimSpace(out))
	require.True(t, strings.HasSuffix(out, "\n"))
	id := sessionFrom(t, errOut)

	code, out, errOut = runDsh("run", "--dir", dir, "--workdir", wd, "--session", id, "--json", "again")
	require.Equal(t, 0, code, errOut)
	var res runResult
	dec := json.NewDecoder(strings.NewReader(out))
	require.NoError(t, dec.Decode(&res))
	require.False(t, dec.More(), "exactly one JSON value")
	require.Equal(t, id, res.Session)
	require.Equal(t, "completed", res.End)
	require.NotEmpty(t, res.Text)
	require.Positive(t, res.Usage.OutputTokens)

	code, _, errOut = runDsh("run", "--dir", dir, "--session", "no-such-session", "hi")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "no session no-such-session")
}

func TestRunUsage(t *testing.T) {
	code, _, errOut := runDsh("run")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "PROMPT")
	code, _, _ = runDsh("run", "--provider", "nope", "--dir", t.TempDir(), "hi")
	require.Equal(t, 2, code)
	code, out, _ := runDsh("run", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "--workdir")
	code, out, _ = runDsh("chat", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "/steer")
	code, _, _ = runDsh("chat", "extra")
	require.Equal(t, 2, code)
	code, out, _ = runDsh("--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "dsh run")
	require.Contains(t, out, "dsh chat")
}

func TestRunAuthFailureIsOneLineWithoutTheKey(t *testing.T) {
	const key = "sk-test-secret-key"
	t.Setenv("DEEPSEEK_API_KEY", key)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":{"message":"Authentication Fails (no such user)","type":"authentication_error"}}`))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	code, out, errOut := runDsh("run", "--dir", t.TempDir(), "--workdir", t.TempDir(), "--base-url", srv.URL, "hi")
	require.Equal(t, 1, code, errOut)
	require.Empty(t, out)
	require.Contains(t, errOut, "authentication failed")
	require.NotContains(t, errOut, key)
	var fails []string
	for _, l := range strings.Split(strings.TrimSpace(errOut), "\n") {
		if strings.HasPrefix(l, "dsh:") {
			fails = append(fails, l)
		}
	}
	require.Len(t, fails, 1, errOut)
}

func TestRunInterruptCancelsFlushesAndResumes(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	stdout, stderr := newNotifyBuffer(), newNotifyBuffer()
	rctx, cancel := context.WithCancel(ctx)
	go func() {
		<-stdout.first
		cancel() // Ctrl-C
	}()
	err := runRun(rctx, []string{"--dir", dir, "--workdir", t.TempDir(), "hello"}, stdout, stderr, slowModel(t, 5000, 500))
	cancel()
	require.ErrorContains(t, err, "interrupted")
	id := sessionFrom(t, stderr.String())

	var out bytes.Buffer
	stderr2 := newNotifyBuffer()
	err = runRun(ctx, []string{"--dir", dir, "--workdir", t.TempDir(), "--session", id, "--json", "again"}, &out, stderr2,
		slowModel(t, 20, 0))
	require.NoError(t, err, stderr2.String())
	var res runResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &res))
	require.Equal(t, "completed", res.End)

	// The cancelled turn is in the log, ended by the user.
	var msgs bytes.Buffer
	require.NoError(t, runChat(ctx, []string{"--dir", dir, "--session", id}, strings.NewReader("/messages\n"), &msgs,
		&bytes.Buffer{}, nil, slowModel(t, 20, 0)))
	require.Equal(t, 4, strings.Count(msgs.String(), "\n"), msgs.String())
}

// fullDisk is an in-memory file system whose writes fail with ENOSPC
// while full is set (storing their first bytes, as on a disk that fills
// up mid-write).
type fullDisk struct {
	*vfs.MemFS
	full atomic.Bool
}

func newFullDisk() *fullDisk {
	d := &fullDisk{MemFS: vfs.NewMem()}
	d.InjectError(func(op vfs.Op, _ string) error {
		if op == vfs.OpWrite && d.full.Load() {
			return &vfs.ShortWrite{N: 7, Err: syscall.ENOSPC}
		}
		return nil
	})
	return d
}

// TestRunTurnEndNotDurableIsAnError: the disk is full, so the end of the
// turn cannot be written. dsh run does not report the turn completed
// (even with --verbose), prints the write error as one line and exits 1.
func TestRunTurnEndNotDurableIsAnError(t *testing.T) {
	fsys := newFullDisk()
	fsys.full.Store(true)
	env := slowModel(t, 5, 0)
	env.fs = fsys
	cmdTalkEnv = env
	t.Cleanup(func() { cmdTalkEnv = talkEnv{} })
	code, out, errOut := runDsh("run", "--dir", t.TempDir(), "--workdir", t.TempDir(), "--verbose", "hello")
	require.Equal(t, exitFailure, code, errOut)
	require.NotEmpty(t, strings.TrimSpace(out), "the text streamed")
	require.NotContains(t, errOut, "completed")
	var failures []string
	for _, l := range strings.Split(strings.TrimSpace(errOut), "\n") {
		if strings.HasPrefix(l, "dsh: ") {
			failures = append(failures, l)
		}
	}
	require.Len(t, failures, 1, errOut)
	require.Contains(t, failures[0], "dsh: run: turn 1's end could not be written: ")
	require.Contains(t, failures[0], syscall.ENOSPC.Error())
}

// A data directory dsh makes (dsh run's --dir, dsh log copy's target) is
// private, 0700, as the directories in it are: it names the sessions and
// their working directories.
func TestDataDirectoriesAreMadePrivate(t *testing.T) {
	t.Setenv("DEEPSEEK_API_KEY", "")
	dir := filepath.Join(t.TempDir(), "data")
	code, _, errOut := runDsh("run", "--dir", dir, "--workdir", t.TempDir(), "hello")
	require.Equal(t, 0, code, errOut)
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "dsh run's data directory")

	copied := filepath.Join(t.TempDir(), "copy")
	code, _, errOut = runDsh("log", "copy", "--from", "jsonl:"+dir, "--to", "jsonl:"+copied)
	require.Equal(t, 0, code, errOut)
	fi, err = os.Stat(copied)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "dsh log copy's target directory")
}
