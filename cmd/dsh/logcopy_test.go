package main

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
)

// twoSessions runs two sessions of synthetic turns into a fresh JSONL
// directory and returns it with their ids.
func twoSessions(t *testing.T) (dir string, ids []string) {
	t.Helper()
	t.Setenv("DEEPSEEK_API_KEY", "")
	dir, wd := t.TempDir(), t.TempDir()
	for _, prompt := range []string{"one", "two"} {
		code, _, errOut := runDsh("run", "--dir", dir, "--workdir", wd, prompt)
		require.Equal(t, exitOK, code, errOut)
		ids = append(ids, sessionFrom(t, errOut))
	}
	code, _, errOut := runDsh("run", "--dir", dir, "--workdir", wd, "--session", ids[0], "again")
	require.Equal(t, exitOK, code, errOut)
	return dir, ids
}

// eventLines is `dsh log events` of a session of a store.
func eventLines(t *testing.T, store, id string) []string {
	t.Helper()
	code, out, errOut := runDsh("log", "events", "--store", store, "--session", id)
	require.Equal(t, exitOK, code, errOut)
	return strings.Split(strings.TrimSuffix(out, "\n"), "\n")
}

// dsh log events prints the logical events, packed rows expanded, one
// object per line in seq order with exactly the envelope's keys; a file
// and the store holding it print the same lines.
func TestLogEventsPrintsLogicalEvents(t *testing.T) {
	dir, ids := twoSessions(t)
	lines := eventLines(t, "jsonl:"+dir, ids[1])
	path := findLog(t, filepath.Join(dir)) // any of the two: compare by its own id below
	f, err := session.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, eventLines(t, "jsonl:"+dir, string(f.Header.ID)), len(f.Events))

	code, out, errOut := runDsh("log", "events", path)
	require.Equal(t, exitOK, code, errOut)
	fileLines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Equal(t, eventLines(t, dir, string(f.Header.ID)), fileLines, "a file and its store print the same events")
	require.Len(t, fileLines, len(f.Events))
	chunks := 0
	for i, l := range fileLines {
		var obj map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(l), &obj), l)
		for k := range obj {
			require.Contains(t, []string{"type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable"}, k)
		}
		for _, k := range []string{"type", "seq", "time", "data"} {
			require.Contains(t, obj, k, l)
		}
		require.JSONEq(t, string(session.AppendEvent(nil, f.Events[i])), l)
		var seq int
		require.NoError(t, json.Unmarshal(obj["seq"], &seq))
		require.Equal(t, i, seq, "seq order")
		if f.Events[i].Type() == session.TypeAssistantChunk {
			chunks++
		}
	}
	require.Greater(t, chunks, 3, "the log holds chunk runs")
	raw, err := session.ReadFile(path)
	require.NoError(t, err)
	stored := session.AppendRecords(nil, raw.Events, session.PackChunks)
	require.Less(t, strings.Count(string(stored), "\n"), len(fileLines), "the file packs chunk rows; events expands them")
	require.NotEmpty(t, lines)

	code, _, errOut = runDsh("log", "events", "--store", "jsonl:"+dir, "--session", "missing")
	require.Equal(t, exitFailure, code)
	require.Equal(t, "dsh: jsonl:"+dir+" session missing: no such session\n", errOut)
}

// The log commands that read take --store URL --session ID in place of
// FILE, and print what they print for the file.
func TestLogCommandsReadAStore(t *testing.T) {
	dir, _ := twoSessions(t)
	path := findLog(t, dir)
	f, err := session.ReadFile(path)
	require.NoError(t, err)
	id := string(f.Header.ID)
	store := []string{"--store", "jsonl:" + dir, "--session", id}
	for _, cmd := range []string{"show", "messages"} {
		code, want, errOut := runDsh("log", cmd, path)
		require.Equal(t, exitOK, code, errOut)
		code, got, errOut := runDsh(append([]string{"log", cmd}, store...)...)
		require.Equal(t, exitOK, code, errOut)
		require.Equal(t, want, got, cmd)
	}
	code, want, _ := runDsh("log", "verify", path)
	require.Equal(t, exitOK, code)
	code, got, errOut := runDsh(append([]string{"log", "verify"}, store...)...)
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, strings.Replace(want, path, "jsonl:"+dir+" session "+id, 1), got)

	code, out, errOut := runDsh(append([]string{"log", "stats", "--json"}, store...)...)
	require.Equal(t, exitOK, code, errOut)
	var st logStats
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, "jsonl:"+dir, st.Store)
	require.Equal(t, int64(len(f.Events)), st.Events)
	require.Equal(t, id, st.Session)

	for _, args := range [][]string{
		{"log", "show", "--store", "jsonl:" + dir},                        // no --session
		{"log", "show", "--session", id, path},                            // --session without --store
		{"log", "show", "--store", "jsonl:" + dir, "--session", id, path}, // both
		{"log", "messages", "--store", "nope:" + dir, "--session", id},
		{"log", "events"},
	} {
		code, _, errOut := runDsh(args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
	}
}

// dsh log copy copies every session of a JSONL directory to another, each
// read back and checked; a rerun finds them there already; a session that
// exists in the target with other events is never overwritten; a missing
// --session fails alone.
func TestLogCopyJSONLToJSONL(t *testing.T) {
	src, ids := twoSessions(t)
	dst := filepath.Join(t.TempDir(), "copy")
	code, out, errOut := runDsh("log", "copy", "--from", "jsonl:"+src, "--to", "jsonl:"+dst)
	require.Equal(t, exitOK, code, errOut)
	require.Empty(t, errOut)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 2, "one line per session")
	sorted := slices.Sorted(slices.Values(ids))
	for i, l := range lines {
		require.Regexp(t, `^session `+sorted[i]+`: copied \d+ events from jsonl:`+src+` to jsonl:`+dst+`, checked$`, l)
	}
	for _, id := range ids {
		require.Equal(t, eventLines(t, "jsonl:"+src, id), eventLines(t, "jsonl:"+dst, id))
	}
	code, out, _ = runDsh("sessions", "--json", "--store", "jsonl:"+dst)
	require.Equal(t, exitOK, code)
	for _, id := range ids {
		require.Contains(t, out, `"id":"`+id+`"`)
	}

	// A rerun changes nothing and says so.
	before := eventLines(t, "jsonl:"+dst, ids[0])
	code, out, errOut = runDsh("log", "copy", "--from", src, "--to", "jsonl:"+dst)
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, 2, strings.Count(out, "left as it is"), out)

	// The source goes on; the target's copy is not overwritten, and the
	// other session, and a missing one, are reported one line each.
	code, _, errOut = runDsh("run", "--dir", src, "--workdir", t.TempDir(), "--session", ids[0], "more")
	require.Equal(t, exitOK, code, errOut)
	code, out, errOut = runDsh("log", "copy", "--from", "jsonl:"+src, "--to", "jsonl:"+dst,
		"--session", ids[0], "--session", "missing", "--session", ids[1])
	require.Equal(t, exitFailure, code)
	require.Equal(t, "session "+ids[1]+": already in jsonl:"+dst+" with the same", out[:len("session "+ids[1]+": already in jsonl:"+dst+" with the same")])
	errLines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	require.Len(t, errLines, 2, errOut)
	require.Equal(t, "dsh: session "+ids[0]+": already in jsonl:"+dst+", holding other events: not overwritten", errLines[0])
	require.Equal(t, "dsh: jsonl:"+src+" session missing: no such session", errLines[1])
	require.Equal(t, before, eventLines(t, "jsonl:"+dst, ids[0]), "the target's copy is unchanged")

	for _, args := range [][]string{
		{"log", "copy", "--to", dst},
		{"log", "copy", "--from", src},
		{"log", "copy", "--from", "nope:" + src, "--to", dst},
		{"log", "copy", "--from", src, "--to", "jsonl:"},
		{"log", "copy", "--from", src, "--to", dst, "extra"},
	} {
		code, _, errOut := runDsh(args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
	}
	_, err := os.Stat(filepath.Join(dst, "nope"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// A source without sessions copies nothing, says so, and leaves the
// target as it was: not created.
func TestLogCopyFromAnEmptyStore(t *testing.T) {
	src := t.TempDir()
	for _, to := range []string{"jsonl:" + filepath.Join(t.TempDir(), "copy"), "sqlite:" + filepath.Join(t.TempDir(), "copy.db")} {
		code, out, errOut := runDsh("log", "copy", "--from", "jsonl:"+src, "--to", to)
		require.Equal(t, exitOK, code, errOut)
		require.Empty(t, errOut)
		require.Equal(t, "no sessions in jsonl:"+src+": nothing copied\n", out)
		_, err := os.Stat(to[strings.Index(to, ":")+1:])
		require.ErrorIs(t, err, fs.ErrNotExist, "%s is not created", to)
	}
}
