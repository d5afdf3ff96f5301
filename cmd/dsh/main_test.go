package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/fixtures"
	"github.com/dshgo/dsh/messages"
	"github.com/stretchr/testify/require"
)

func runDsh(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestVerifyPassesOnEveryCorpusFile(t *testing.T) {
	files, err := fixtures.CorpusFiles()
	require.NoError(t, err)
	require.NotEmpty(t, files)
	code, out, errOut := runDsh(append([]string{"log", "verify", "--fixture"}, files...)...)
	require.Equal(t, exitOK, code, errOut)
	require.Empty(t, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, len(files), "one summary line per file")
	for i, l := range lines {
		require.True(t, strings.HasPrefix(l, files[i]+": ok: "), l)
		require.Regexp(t, `: ok: \d+ events, \d+ turns?, \d+ derived messages?`, l)
	}
}

func TestVerifyNotesAnOpenLastTurn(t *testing.T) {
	path := writeLog(t, "open.jsonl", func(l *session.Log) {
		appendOK(t, l, session.TurnStart{Turn: 1}.Draft())
	})
	code, out, _ := runDsh("log", "verify", path)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "2 events, 1 turn, 1 derived message; turn 1 is open")
}

func TestVerifyRejectsInvalidFilesWithOneLineEach(t *testing.T) {
	dir := t.TempDir()
	good := writeLog(t, "good.jsonl", nil)
	goodLines := readLines(t, good)
	header, first := goodLines[0], goodLines[1]

	write := func(name string, lines ...string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(strings.Join(lines, "\n")), 0o600))
		return p
	}
	turnEnd := `{"type":"turn/end","seq":%d,"time":0,"data":{"turn":1,"reason":{"kind":"completed"}}}`
	cases := []struct {
		name, path, want string
	}{
		{"torn tail", write("torn.jsonl", header, first+"\n"+`{"type":"turn/st`), "torn tail at byte"},
		{"seq gap before a turn end", write("gap.jsonl", header,
			strings.Replace(first, `"seq":0`, `"seq":1`, 1), strings.Replace(turnEnd, "%d", "2", 1)+"\n"),
			"seq gap in committed region"},
		{"future version", write("future.jsonl", `{"type":"session","version":3,"id":"x","createdAt":0,"delegationDepth":0}`+"\n"), "upgrade"},
		{"unknown type", write("unknown.jsonl", header, `{"type":"made/up","seq":0,"time":0,"data":{}}`+"\n"),
			`seq 0: unknown event type "made/up"`},
		{"stray surfaceOp", write("stray.jsonl", header, `{"type":"todo/write","seq":0,"time":0,"data":{"todos":[]},"surfaceOp":"append"}`+"\n"),
			"seq 0 (todo/write): surface metadata"},
		{"missing surfaceOp", write("missing.jsonl", header, strings.Replace(first, `,"surfaceOp":"append"`, "", 1)+"\n"),
			"seq 0 (user/message): surface event lacks its surfaceOp"},
		{"non-JSON data", write("nonjson.jsonl", header, `{"type":"user/message","seq":0,"time":0,"data":{"a":-0},"surfaceOp":"append"}`+"\n"),
			"negative zero"},
		{"replace of a non-surface seq", write("replace.jsonl", header, first,
			`{"type":"session/title","seq":1,"time":0,"data":{"title":"t"}}`,
			strings.NewReplacer(`"seq":0`, `"seq":2`, `"surfaceOp":"append"`, `"surfaceOp":{"op":"replace","start":1,"end":1}`).Replace(first)+"\n"),
			"replace start 1 is not a current surface node"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.NotContains(t, first, "\n")
			code, out, errOut := runDsh("log", "verify", good, c.path)
			require.Equal(t, exitFailure, code)
			require.Contains(t, out, good+": ok", "valid files still get their line")
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			require.Len(t, lines, 1, errOut)
			require.Contains(t, lines[0], c.path)
			require.Contains(t, lines[0], c.want)
			if c.name == "torn tail" {
				require.Contains(t, lines[0], "run 'dsh log repair "+c.path+"'")
			}
		})
	}
}

func TestMessagesPrintsDerivedMessagesAsJSONLines(t *testing.T) {
	path := filepath.Join(mustCorpus(t), "acp", "text-turn", "session.jsonl")
	code, out, errOut := runDsh("log", "messages", "--fixture", path)
	require.Equal(t, exitOK, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3)
	var roles []messages.Role
	for _, l := range lines {
		m, err := messages.ImportMessage(messages.MustParseJSON(l))
		require.NoError(t, err)
		roles = append(roles, m.Role())
	}
	require.Equal(t, []messages.Role{"user", "user", "assistant"}, roles)
	require.Contains(t, lines[2], `"text":"PONG"`)
}

func TestShowPrintsATranscript(t *testing.T) {
	path := filepath.Join(mustCorpus(t), "acp", "tool-call-turn", "session.jsonl")
	code, out, errOut := runDsh("log", "show", "--fixture", path)
	require.Equal(t, exitOK, code, errOut)
	for _, want := range []string{"── turn 1", "step 2", "tool call call_", "SNAPSHOT_OK", "turn 1 ended: completed"} {
		require.Contains(t, out, want)
	}
}

func TestUsageErrorsExitTwoAndHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{}, {"nope"}, {"log"}, {"log", "verify"}, {"log", "verify", "--bogus", "f"},
		{"log", "show", "a", "b"}, {"log", "verify", "f", "--fixture"}} {
		code, out, errOut := runDsh(args...)
		require.Equal(t, exitUsage, code, "%v", args)
		require.Empty(t, out, "%v", args)
		require.Contains(t, errOut, "dsh: ", "%v", args)
	}
	for _, args := range [][]string{{"--help"}, {"log", "verify", "--help"}, {"log", "show", "-h"}} {
		code, out, _ := runDsh(args...)
		require.Equal(t, exitOK, code, "%v", args)
		require.Contains(t, out, "Usage")
	}
}

func TestMissingFileIsOneLine(t *testing.T) {
	code, _, errOut := runDsh("log", "show", "/no/such/session.jsonl")
	require.Equal(t, exitFailure, code)
	require.Equal(t, "dsh: /no/such/session.jsonl: no such file or directory\n", errOut)
}

func mustCorpus(t *testing.T) string {
	t.Helper()
	dir, err := fixtures.CorpusDir()
	require.NoError(t, err)
	return dir
}

// writeLog writes a plain log holding one user message and whatever build
// appends, and returns its path.
func writeLog(t *testing.T, name string, build func(*session.Log)) string {
	t.Helper()
	h := session.Header{ID: "cli-test", CreatedAt: 1, Cwd: "/tmp"}
	l, err := session.New(h)
	require.NoError(t, err)
	m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("hi")}, messages.UserSource())
	require.NoError(t, err)
	appendOK(t, l, session.UserMessage{Message: m}.Draft())
	if build != nil {
		build(l)
	}
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, session.WriteFile(path, h, l.Events().Slice(), session.WriteOptions{}))
	return path
}

func appendOK(t *testing.T, l *session.Log, d session.Draft) {
	t.Helper()
	_, err := l.Append(d, 5)
	require.NoError(t, err)
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	require.NoError(t, sc.Err())
	return lines
}

func TestStatsCountsTheLog(t *testing.T) {
	path := filepath.Join(mustCorpus(t), "acp", "packed-chunks", "session.jsonl")
	code, out, errOut := runDsh("log", "stats", "--json", "--fixture", path)
	require.Equal(t, exitOK, code, errOut)
	var st logStats
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, int64(124), st.Events)
	require.Equal(t, int64(105), st.ByType["assistant/chunk"])
	require.Equal(t, int64(1), st.TurnEnds["completed"])
	require.Equal(t, int64(2), st.Steps)
	require.Equal(t, int64(1), st.ToolCalls)
	require.Equal(t, 35, st.PackedRecords, "the file's own packing, reproduced")

	code, out, _ = runDsh("log", "stats", "--fixture", path)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "turns      1, 1 completed, 2 steps, 5 derived messages")
}
