package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/testutil"
)

// TestLogCommandsReadHostileFilesInBoundedMemory: every dsh log command
// on a zstd newline bomb (3 KB on disk, 100 MiB of newlines in its second
// frame) and on a plain file whose second line is 50 MB allocates less
// than 48 MiB (the limit on one line, twice, as its buffer doubles, and
// the decoder's window), and says what is wrong in one line: the bomb has
// a torn tail where its second frame starts (an empty line does not
// parse), the long line is over the limit on one record. `dsh log verify`
// took 18 GB for the bomb; the long line was read whole.
func TestLogCommandsReadHostileFilesInBoundedMemory(t *testing.T) {
	dir := t.TempDir()
	h := session.Header{ID: "bomb", CreatedAt: 1, Cwd: "/w"}
	header := []byte(h.JSON().String())
	bomb := filepath.Join(dir, "bomb.jsonl.zstd")
	head := testutil.ZstdFrame(testutil.Repeat{Text: append(append([]byte{}, header...), '\n'), N: 1})
	require.NoError(t, os.WriteFile(bomb, testutil.ZstdNewlineBomb(header, 100<<20), 0o600))

	long := filepath.Join(dir, "long.jsonl")
	fh, err := os.Create(long)
	require.NoError(t, err)
	w := bufio.NewWriter(fh)
	_, err = w.WriteString(string(header) + "\n" + `{"type":"user/message","seq":0,"time":0,"data":"`)
	require.NoError(t, err)
	chunk := strings.Repeat("x", 1<<20)
	for range 50 {
		_, err = w.WriteString(chunk)
		require.NoError(t, err)
	}
	_, err = w.WriteString("\"}\n")
	require.NoError(t, err)
	require.NoError(t, w.Flush())
	require.NoError(t, fh.Close())

	for _, c := range []struct {
		path, want string
	}{
		{bomb, "torn tail at byte " + itoa(len(head)) + " (seq 0)"},
		{long, "line 2 (seq 0): record too long: the line at offset " + itoa(len(header)+1) + " is longer than the limit of 16 MiB on one record"},
	} {
		for _, args := range [][]string{
			{"verify"}, {"show"}, {"messages"}, {"stats"}, {"stats", "--json"}, {"replay"},
			{"fork", "--at", "0", "--out", filepath.Join(dir, "fork.jsonl")},
		} {
			t.Run(filepath.Base(c.path)+"/"+strings.Join(args[:1], " "), func(t *testing.T) {
				var code int
				var stdout, stderr string
				n := testutil.Allocated(func() {
					code, stdout, stderr = runDsh(append(append([]string{"log"}, args...), c.path)...)
				})
				require.Less(t, n, uint64(48<<20), "allocated %d MiB", n>>20)
				require.Equal(t, 1, code, "stdout %q stderr %q", stdout, stderr)
				require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
				require.Contains(t, stderr, c.want)
			})
		}
	}

	// Repair cuts the bomb's torn tail, reading it as boundedly.
	var code int
	var stderr string
	n := testutil.Allocated(func() { code, _, stderr = runDsh("log", "repair", bomb) })
	require.Less(t, n, uint64(48<<20), "repair allocated %d MiB", n>>20)
	require.Equal(t, 0, code, stderr)
	fi, err := os.Stat(bomb)
	require.NoError(t, err)
	require.Equal(t, int64(len(head)), fi.Size())
}

func itoa(n int) string { return strconv.Itoa(n) }
