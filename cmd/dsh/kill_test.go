package main

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dshgo/dsh/actors/session"
	"github.com/stretchr/testify/require"
)

// lockedBuffer is a bytes.Buffer safe to fill from a process's pipe while
// the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

// TestKilledDshProcessMidTurnResumes builds the real dsh binary, kills a
// `dsh run` with SIGKILL while its turn streams, and restarts dsh on the
// same directory: the log is repaired (the interrupted turn closed), valid,
// and the next turn completes.
func TestKilledDshProcessMidTurnResumes(t *testing.T) {
	bin := buildDsh(t)

	dir := t.TempDir()
	work := t.TempDir()
	var stdout lockedBuffer
	cmd := exec.Command(bin, "run", "--dir", dir, "--workdir", work, "--synthetic-speed", "20", "tell me a story")
	cmd.Stdout = &stdout
	cmd.Env = append(os.Environ(), "DEEPSEEK_API_KEY=")
	require.NoError(t, cmd.Start())
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})

	// Wait until the turn is streaming and its first events are on disk:
	// the log is created with its first write, so it exists (empty, or
	// ending inside its header) a moment before it holds them, and a kill
	// then leaves no session (a torn creation, see docs/durability.md).
	var logPath string
	deadline := time.Now().Add(30 * time.Second)
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for logPath = findLog(t, dir); logPath == "" || stdout.Len() == 0 || !holdsEvents(logPath); logPath = findLog(t, dir) {
		require.True(t, time.Now().Before(deadline), "the run never started streaming to disk")
		<-poll.C
	}
	require.NoError(t, cmd.Process.Kill())
	killed = true
	_ = cmd.Wait()

	f, err := session.ReadFile(logPath)
	require.NoError(t, err, "a killed writer never leaves a corrupt log")
	id := string(f.Header.ID)
	_, _, open := mustLog(t, f).OpenTurn()
	require.True(t, open || f.Torn != nil, "the kill landed mid-turn")

	resume := exec.Command(bin, "run", "--dir", dir, "--workdir", work, "--session", id, "and then?")
	resume.Env = cmd.Env
	var rout, rerr bytes.Buffer
	resume.Stdout, resume.Stderr = &rout, &rerr
	require.NoError(t, resume.Run(), "resume: %s", rerr.String())
	require.NotEmpty(t, strings.TrimSpace(rout.String()))

	f, err = session.ReadFile(logPath)
	require.NoError(t, err)
	require.Nil(t, f.Torn)
	l := mustLog(t, f)
	require.NoError(t, session.CheckTrace(f.Events))
	_, _, open = l.OpenTurn()
	require.False(t, open)
	var ends []session.TurnEndKind
	for _, e := range f.Events {
		if p, ok := e.Payload().(session.TurnEnd); ok {
			ends = append(ends, p.Reason.Kind)
		}
	}
	require.Equal(t, []session.TurnEndKind{session.EndInterrupted, session.EndCompleted}, ends)

	verify := exec.Command(bin, "log", "verify", logPath)
	vout, err := verify.Output()
	require.NoError(t, err)
	require.Contains(t, string(vout), ": ok: ")
	require.NotContains(t, string(vout), "open")
}

// holdsEvents reports whether the log at path reads with at least one
// event.
func holdsEvents(path string) bool {
	f, err := session.ReadFile(path)
	return err == nil && len(f.Events) > 0
}

func findLog(t *testing.T, dir string) string {
	t.Helper()
	var found string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (d.Name() == "session.jsonl.zstd" || d.Name() == "session.jsonl") {
			found = p
		}
		return nil
	})
	return found
}

func mustLog(t *testing.T, f *session.File) *session.Log {
	t.Helper()
	l, err := f.Log()
	require.NoError(t, err)
	return l
}
