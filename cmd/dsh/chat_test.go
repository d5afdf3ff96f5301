package main

import (
	"encoding/json"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// messageLines parses the JSON lines of /messages output.
func messageLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var ms []map[string]any
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		ms = append(ms, m)
	}
	return ms
}

func TestChatScriptForkAndMessages(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	pr, pw := io.Pipe()
	stdout, stderr := newNotifyBuffer(), newNotifyBuffer()
	done := make(chan error, 1)
	go func() {
		done <- runChat(ctx, []string{"--dir", dir, "--workdir", t.TempDir()}, pr, stdout, stderr, nil, slowModel(t, 20, 0))
	}()
	_, err := io.WriteString(pw, "hello\n/wait\n/messages\n/fork\n/inject note\nsecond\n/wait\n/messages\n/bogus\n/steer\n")
	require.NoError(t, err)
	require.NoError(t, pw.Close())
	require.NoError(t, <-done)

	ms := messageLines(t, stdout.String())
	require.Len(t, ms, 2+5)
	require.Equal(t, "user", ms[0]["role"])
	require.Equal(t, "assistant", ms[1]["role"])
	require.Equal(t, ms[0]["id"], ms[2]["id"], "the fork inherits the history")
	require.Equal(t, "user", ms[4]["role"])
	require.Equal(t, "user", ms[5]["role"])
	require.Contains(t, stdout.String(), `"text":"note"`)
	require.Contains(t, stderr.String(), "forked")
	require.Contains(t, stderr.String(), "unknown command /bogus")
	require.Contains(t, stderr.String(), "usage: /steer TEXT")
	ids := strings.Fields(stderr.String())
	require.NotEmpty(t, ids)
	// The last line names the fork, where the chat went on.
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	last := lines[len(lines)-1]
	require.True(t, strings.HasPrefix(last, "session "), last)
	require.Contains(t, stderr.String(), "now in "+strings.TrimPrefix(last, "session "))
}

func TestChatSteerWhileStreaming(t *testing.T) {
	ctx := testContext(t)
	pr, pw := io.Pipe()
	stdout, stderr := newNotifyBuffer(), newNotifyBuffer()
	done := make(chan error, 1)
	go func() {
		done <- runChat(ctx, []string{"--dir", t.TempDir(), "--workdir", t.TempDir()}, pr, stdout, stderr, nil,
			slowModel(t, 200, 1000))
	}()
	_, err := io.WriteString(pw, "hello\n")
	require.NoError(t, err)
	<-stdout.first // streaming
	_, err = io.WriteString(pw, "/steer focus on the log\n/wait\n/messages\n")
	require.NoError(t, err)
	require.NoError(t, pw.Close())
	require.NoError(t, <-done, stderr.String())
	var texts []string
	for _, m := range messageLines(t, stdout.String()) {
		if m["role"] == "user" {
			texts = append(texts, m["content"].([]any)[0].(map[string]any)["text"].(string))
		}
	}
	require.Equal(t, []string{"hello", "focus on the log"}, texts)
}

func TestChatCancelAndCtrlC(t *testing.T) {
	ctx := testContext(t)
	pr, pw := io.Pipe()
	stdout, stderr := newNotifyBuffer(), newNotifyBuffer()
	intr := make(chan os.Signal, 1)
	done := make(chan error, 1)
	go func() {
		done <- runChat(ctx, []string{"--dir", t.TempDir(), "--workdir", t.TempDir()}, pr, stdout, stderr, intr,
			slowModel(t, 5000, 500))
	}()
	_, err := io.WriteString(pw, "hello\n")
	require.NoError(t, err)
	<-stdout.first
	_, err = io.WriteString(pw, "/cancel\n/wait\n")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "[turn 1 cancelled]") },
		30*time.Second, time.Millisecond, "the first turn is cancelled")
	n := len(stdout.String())
	_, err = io.WriteString(pw, "again\n")
	require.NoError(t, err)
	// Ctrl-C cancels the second turn once it streams (sent while no turn
	// runs, it leaves the chat instead); end of input then leaves once idle.
	require.Eventually(t, func() bool { return len(stdout.String()) > n+8 },
		30*time.Second, time.Millisecond, "the second turn streams")
	intr <- os.Interrupt
	require.NoError(t, pw.Close())
	require.NoError(t, <-done, stderr.String())
	require.Contains(t, stderr.String(), "[turn 1 cancelled]")
	require.Contains(t, stderr.String(), "cancelling the turn (Ctrl-C)")
}

func TestChatQuitCancelsTheRunningTurn(t *testing.T) {
	ctx := testContext(t)
	pr, pw := io.Pipe()
	stdout, stderr := newNotifyBuffer(), newNotifyBuffer()
	done := make(chan error, 1)
	go func() {
		done <- runChat(ctx, []string{"--dir", t.TempDir(), "--workdir", t.TempDir()}, pr, stdout, stderr, nil,
			slowModel(t, 5000, 500))
	}()
	_, err := io.WriteString(pw, "hello\n")
	require.NoError(t, err)
	<-stdout.first
	_, err = io.WriteString(pw, "/quit\n")
	require.NoError(t, err)
	require.NoError(t, <-done, stderr.String())
	require.NoError(t, pw.Close())
	require.Contains(t, stderr.String(), "[turn 1 cancelled]")
}

// TestChatTurnEndNotDurableUntilRetried: the disk is full when a turn
// ends. dsh chat does not report it completed; it says its end is not
// durable yet, with the write error, and that it is retried. Once space
// is freed the turn is reported durable and the chat goes on.
func TestChatTurnEndNotDurableUntilRetried(t *testing.T) {
	ctx := testContext(t)
	fsys := newFullDisk()
	fsys.full.Store(true)
	env := slowModel(t, 5, 0)
	env.fs = fsys
	pr, pw := io.Pipe()
	stdout, stderr := newNotifyBuffer(), newNotifyBuffer()
	done := make(chan error, 1)
	go func() {
		done <- runChat(ctx, []string{"--dir", t.TempDir(), "--workdir", t.TempDir(), "--verbose"}, pr, stdout, stderr, nil, env)
	}()
	_, err := io.WriteString(pw, "hello\n")
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), "not durable yet") {
		require.True(t, time.Now().Before(deadline), "no not-durable notice in %q", stderr.String())
		<-time.After(time.Millisecond)
	}
	warned := stderr.String()
	require.NotContains(t, warned, "[turn 1 completed]")
	require.Contains(t, warned, "[turn 1's end (completed) is not durable yet: ")
	require.Contains(t, warned, syscall.ENOSPC.Error())
	require.Contains(t, warned, "retried in the background]")

	fsys.full.Store(false)
	_, err = io.WriteString(pw, "/wait\nagain\n/wait\n")
	require.NoError(t, err)
	require.NoError(t, pw.Close())
	require.NoError(t, <-done, stderr.String())
	require.Contains(t, stderr.String(), "[turn 1 completed; its end is durable now]")
	require.Contains(t, stderr.String(), "[turn 2 completed]")
}
