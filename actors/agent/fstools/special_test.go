package fstools

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/messages"
)

// callPromptly runs a tool call in a goroutine and fails the test if it
// has not returned within a generous deadline (rather than hanging the
// test run). unblock, if not nil, is called on that failure to release
// a call stuck in the kernel, so no goroutine is left behind.
func callPromptly(t *testing.T, s *Set, name, args string, unblock func()) agent.Result {
	t.Helper()
	type reply struct {
		r   agent.Result
		err error
	}
	done := make(chan reply, 1)
	go func() {
		r, err := toolNamed(t, s, name).Execute(context.Background(), agent.Call{Name: name, Input: messages.MustParseJSON(args)})
		done <- reply{r, err}
	}()
	deadline, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case got := <-done:
		require.NoError(t, got.err)
		return got.r
	case <-deadline.Done():
		if unblock != nil {
			unblock()
		}
		<-done
		t.Fatalf("%s %s did not return: it blocked", name, args)
		return agent.Result{}
	}
}

func toolNamed(t *testing.T, s *Set, name string) agent.Tool {
	for _, tool := range s.Tools() {
		if tool.Name() == name {
			return tool
		}
	}
	t.Errorf("no tool %q", name)
	return nil
}

// openWriter opens the FIFO at path for writing without blocking (which
// succeeds only while a reader has it open), releasing a blocked reader.
func openWriter(path string) func() {
	return func() {
		if fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = syscall.Close(fd)
		}
	}
}

func TestSpecialFilesAreRefusedWithoutBlocking(t *testing.T) {
	s, wd := fixture(t)
	fifo := filepath.Join(wd, "pipe")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	require.NoError(t, os.Symlink("pipe", filepath.Join(wd, "pipe-link")))

	msg := refused(t, callPromptly(t, s, "read_file", `{"path":"pipe"}`, openWriter(fifo)), CodeNotAFile)
	require.Contains(t, msg, "not a regular file")
	refused(t, callPromptly(t, s, "read_file", `{"path":"pipe-link"}`, openWriter(fifo)), CodeNotAFile)
	refused(t, callPromptly(t, s, "list_dir", `{"path":"pipe"}`, openWriter(fifo)), CodeNotADir)
	require.Equal(t, "(no matches)", ok(t, callPromptly(t, s, "grep", `{"pattern":"zzz"}`, openWriter(fifo))))
	require.Equal(t, "(no matches)", ok(t, callPromptly(t, s, "grep", `{"pattern":"zzz","path":"pipe"}`, openWriter(fifo))))

	// A unix socket: open fails with ENXIO, which is the same refusal.
	sock := filepath.Join(wd, "sock")
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer l.Close()
	msg = refused(t, callPromptly(t, s, "read_file", `{"path":"sock"}`, nil), CodeNotAFile)
	require.Contains(t, msg, "not a regular file")
}

// A regular file swapped for a FIFO between the look and the open is
// still refused without blocking: the open does not wait and the opened
// descriptor's type is what counts.
func TestAFileSwappedForAFIFOIsRefused(t *testing.T) {
	s, wd := fixture(t)
	target := filepath.Join(wd, "swap")
	require.NoError(t, os.WriteFile(target, []byte("harmless\n"), 0o600))
	s.beforeOpen = func(rel string) {
		if rel == "swap" {
			require.NoError(t, os.Remove(target))
			require.NoError(t, syscall.Mkfifo(target, 0o600))
		}
	}
	refused(t, callPromptly(t, s, "read_file", `{"path":"swap"}`, openWriter(target)), CodeNotAFile)
}

func TestReadFileBoundsAHugeLine(t *testing.T) {
	s, wd := fixture(t)
	huge := strings.Repeat("x", 3*maxReadBytes) + "\r\nshort\n"
	require.NoError(t, os.WriteFile(filepath.Join(wd, "huge.txt"), []byte(huge), 0o600))
	out := ok(t, call(t, s, "read_file", `{"path":"huge.txt"}`))
	require.Equal(t, "     1\t"+strings.Repeat("x", maxLineBytes)+"…\n     2\tshort\n", out)
}

// manyFiles makes a workdir of n small files that all match "needle".
func manyFiles(t *testing.T, n int) *Set {
	t.Helper()
	wd := t.TempDir()
	for i := range n {
		require.NoError(t, os.WriteFile(filepath.Join(wd, fmt.Sprintf("f%04d.txt", i)), []byte("needle\n"), 0o600))
	}
	s, err := New(wd)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Cancelling a search part-way stops it at the next entry: it returns
// ctx's error (recorded as aborted), having visited no more entries.
func TestCancelStopsAWalkAtTheNextEntry(t *testing.T) {
	for _, tc := range []struct{ name, args string }{
		{"grep", `{"pattern":"needle"}`},
		{"glob", `{"pattern":"**/*.txt"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := manyFiles(t, 200)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			visited := 0
			s.visit = func(string) {
				visited++
				if visited == 10 {
					cancel()
				}
			}
			_, err := toolNamed(t, s, tc.name).Execute(ctx, agent.Call{Name: tc.name, Input: messages.MustParseJSON(tc.args)})
			require.ErrorIs(t, err, context.Canceled)
			require.Equal(t, 10, visited, "the walk stops at the entry after the cancel")
		})
	}
}

func TestEveryToolReturnsCtxErrorWhenCancelled(t *testing.T) {
	s, _ := fixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for name, args := range map[string]string{
		"read_file": `{"path":"a.txt"}`,
		"list_dir":  `{}`,
		"glob":      `{"pattern":"*"}`,
		"grep":      `{"pattern":"one"}`,
	} {
		_, err := toolNamed(t, s, name).Execute(ctx, agent.Call{Name: name, Input: messages.MustParseJSON(args)})
		require.ErrorIs(t, err, context.Canceled, name)
	}
}

// A listing keeps the first maxListEntries names, in order, and counts
// the rest, however many there are.
func TestListDirKeepsTheFirstNames(t *testing.T) {
	n := 2*maxListEntries + 5
	s := manyFiles(t, n)
	out := ok(t, call(t, s, "list_dir", `{}`))
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, maxListEntries+1)
	for i, l := range lines[:maxListEntries] {
		require.Equal(t, fmt.Sprintf("f%04d.txt", i), l)
	}
	require.Equal(t, fmt.Sprintf("(%d more entries)", n-maxListEntries), lines[maxListEntries])
}
