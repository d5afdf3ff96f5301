package main

import (
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestChatRefusesAPromptTooLargeToRecord: a prompt line whose record would
// be longer than the log reader accepts is refused in one line naming the
// limit; nothing is queued and the chat goes on with the next prompt.
func TestChatRefusesAPromptTooLargeToRecord(t *testing.T) {
	ctx := testContext(t)
	pr, pw := io.Pipe()
	stdout, stderr := newNotifyBuffer(), newNotifyBuffer()
	done := make(chan error, 1)
	go func() {
		done <- runChat(ctx, []string{"--dir", t.TempDir(), "--workdir", t.TempDir()}, pr, stdout, stderr, nil, slowModel(t, 5, 0))
	}()
	go func() {
		_, _ = io.WriteString(pw, strings.Repeat("x", 16<<20-100)+"\nhi\n/wait\n/messages\n")
		_ = pw.Close()
	}()
	require.NoError(t, <-done)

	ms := messageLines(t, stdout.String())
	require.Len(t, ms, 2, "only the small prompt was queued")
	require.Equal(t, "user", ms[0]["role"])
	require.Contains(t, stdout.String(), `"text":"hi"`)
	var refusals []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, "too large") {
			refusals = append(refusals, l)
		}
	}
	require.Len(t, refusals, 1, stderr.String())
	require.Contains(t, refusals[0], "limit of 16777216 bytes")
	require.Less(t, len(refusals[0]), 300)
}

// TestChatLineLongerThanItsReaderTakesIsAnError: an input line longer
// than the chat reads (16 MiB) ends the chat with one error line instead
// of silently as if the input had ended.
func TestChatLineLongerThanItsReaderTakesIsAnError(t *testing.T) {
	ctx := testContext(t)
	pr, pw := io.Pipe()
	stdout, stderr := newNotifyBuffer(), newNotifyBuffer()
	done := make(chan error, 1)
	go func() {
		done <- runChat(ctx, []string{"--dir", t.TempDir(), "--workdir", t.TempDir()}, pr, stdout, stderr, nil, slowModel(t, 5, 0))
	}()
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		_, _ = io.WriteString(pw, strings.Repeat("x", 17<<20)+"\n/messages\n")
		_ = pw.Close()
	}()
	err := <-done
	require.NoError(t, pr.Close()) // the chat stopped reading: unblock the writer
	<-wrote
	require.Error(t, err)
	require.Equal(t, "chat: reading input: an input line is longer than 16 MiB", err.Error())
	require.Empty(t, messageLines(t, stdout.String()))
}
