package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestErrorLinesNameThePathOnce: every log command reports a bad file as
// one line, "dsh: PATH: cause": a missing file is not "invalid", the path
// is not repeated after the cause or by a lower layer, no package prefix
// comes twice, and a duplicate key in the header is called that.
func TestErrorLinesNameThePathOnce(t *testing.T) {
	dir := t.TempDir()
	good := readLines(t, writeLog(t, "good.jsonl", nil))
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	missing := filepath.Join(dir, "missing.jsonl")
	empty := write("empty.jsonl", "")
	garbage := write("garbage.jsonl", "\x00\x01garbage\n")
	dup := write("dup.jsonl", strings.Replace(good[0], `"version":0`, `"version":0,"version":0`, 1)+"\n")
	badData := write("bad.jsonl", good[0]+"\n"+strings.Replace(good[1], `"seq":0`, `"seq":"0"`, 1)+"\n"+
		`{"type":"turn/end","seq":1,"time":0,"data":{"turn":1,"reason":{"kind":"completed"}}}`+"\n")
	cases := []struct{ path, want string }{
		{missing, missing + ": no such file or directory"},
		{empty, empty + ": log has no complete header line"},
		{garbage, garbage + `: not a session header: messages: not lossless JSON: invalid character '\x00' at offset 0`},
		{dup, dup + `: not a session header: messages: not lossless JSON: duplicate key "version" at offset 30`},
		{badData, badData + ": line 2 (seq 0): unparsable committed event: seq is not a non-negative safe integer"},
	}
	for _, c := range cases {
		for _, cmd := range [][]string{{"verify"}, {"show"}, {"messages"}, {"stats"}, {"repair"}, {"replay"},
			{"fork", "--at", "0", "--out", filepath.Join(dir, "fork.jsonl")}} {
			t.Run(filepath.Base(c.path)+"/"+cmd[0], func(t *testing.T) {
				code, out, errOut := runDsh(append(append([]string{"log"}, cmd...), c.path)...)
				require.Equal(t, exitFailure, code)
				require.Empty(t, out)
				require.Equal(t, "dsh: "+c.want+"\n", errOut)
			})
		}
	}
}

// TestForkOutputErrorNamesThePathOnce: a fork whose --out cannot be
// created says so in one line naming --out once.
func TestForkOutputErrorNamesThePathOnce(t *testing.T) {
	path := filepath.Join(mustCorpus(t), "acp", "multi-turn", "session.jsonl")
	out := filepath.Join(t.TempDir(), "no-such-dir", "child.jsonl")
	code, stdout, errOut := runDsh("log", "fork", "--fixture", "--at", "36", "--out", out, path)
	require.Equal(t, exitFailure, code)
	require.Empty(t, stdout)
	require.Equal(t, "dsh: "+out+": no such file or directory\n", errOut)
}

// TestAStoreThatCannotOpenIsOneLine: dsh sessions and dsh bench on a data
// directory that is a file, or that holds another layout, print one line
// naming it once, and bench prints no report of a load that never ran.
func TestAStoreThatCannotOpenIsOneLine(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	flat := filepath.Join(dir, "flat")
	require.NoError(t, os.MkdirAll(filepath.Join(flat, "proj"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(flat, "proj", "x.jsonl"), nil, 0o600))
	layout := "dsh: persister: open " + flat + ": root holds another layout: " + filepath.Join(flat, "proj", "x.jsonl") +
		" is in the obsolete flat layout <project>/<id>.jsonl\n"

	code, out, errOut := runDsh("sessions", "--dir", flat)
	require.Equal(t, exitFailure, code)
	require.Empty(t, out)
	require.Equal(t, layout, errOut)

	for _, c := range []struct{ dir, want string }{
		{file, "dsh: persister: open store: open " + file + ": not a directory\n"},
		{flat, layout},
	} {
		code, out, errOut = runDsh("bench", "--quiet", "--sessions", "1", "--turns", "1", "--no-baselines", "--dir", c.dir)
		require.Equal(t, exitFailure, code)
		require.Empty(t, out, "no report of a load that never ran")
		require.Equal(t, c.want, errOut)
	}
}
