package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/fixtures"
	"github.com/stretchr/testify/require"
)

func TestRepairCutsATornTailClosesTheTurnAndVerifies(t *testing.T) {
	path := writeLog(t, "session.jsonl", func(l *session.Log) {
		appendOK(t, l, session.TurnStart{Turn: 1}.Draft())
		appendOK(t, l, session.StepStart{Turn: 1, Step: 1}.Draft())
	})
	clean, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, append(clean, `{"type":"step/e`...), 0o600))

	code, _, errOut := runDsh("log", "verify", path)
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "run 'dsh log repair")

	code, out, errOut := runDsh("log", "repair", path)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, path+": repaired: cut a torn tail of 15 B at byte")
	require.Contains(t, out, "closed turn 1 as interrupted; now 5 events")

	code, out, errOut = runDsh("log", "verify", path)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "5 events, 1 turn")
	require.NotContains(t, out, "open")

	code, out, _ = runDsh("log", "repair", path)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "nothing to repair (5 events, balanced)")
}

func TestRepairNeverTouchesACorruptFile(t *testing.T) {
	path := writeLog(t, "session.jsonl", nil)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	bad := append(append([]byte{}, data...), "garbage\n"+
		`{"type":"turn/end","seq":2,"time":0,"data":{"turn":1,"reason":{"kind":"completed"}}}`+"\n"...)
	require.NoError(t, os.WriteFile(path, bad, 0o600))
	code, out, errOut := runDsh("log", "repair", path)
	require.Equal(t, exitFailure, code)
	require.Empty(t, out)
	require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	require.Contains(t, errOut, "unparsable committed event")
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, bad, after)
}

func TestSessionsListsAStore(t *testing.T) {
	dir := t.TempDir()
	code, out, _ := runDsh("sessions", "--dir", dir)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "no sessions under")

	store, err := persister.NewJSONLStore(persister.JSONLConfig{Root: dir})
	require.NoError(t, err)
	for _, id := range []session.SessionID{"beta", "alpha"} {
		h := session.Header{ID: id, CreatedAt: 1_700_000_000_000, Cwd: "/work/p"}
		require.NoError(t, store.Create(h))
		l, err := session.New(h)
		require.NoError(t, err)
		appendOK(t, l, session.TurnStart{Turn: 1}.Draft())
		require.NoError(t, store.Append(context.Background(), id, l.Events().Slice(), persister.Sync))
	}
	require.NoError(t, store.Create(session.Header{ID: "never-appended", CreatedAt: 1}))
	require.NoError(t, store.Close())

	code, out, errOut := runDsh("sessions", "--dir", dir)
	require.Equal(t, exitOK, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3)
	require.True(t, strings.HasPrefix(lines[1], "alpha "))
	require.True(t, strings.HasPrefix(lines[2], "beta "))
	require.Contains(t, lines[1], "2023-11-14 22:13:20   /work/p")

	code, out, _ = runDsh("sessions", "--json", "--dir", dir)
	require.Equal(t, exitOK, code)
	var rows []sessionRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 2)
	require.Equal(t, "alpha", rows[0].ID)

	code, _, errOut = runDsh("sessions", "--dir", filepath.Join(dir, "missing"))
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "not a directory")
}

func TestForkWritesASeededChild(t *testing.T) {
	path := filepath.Join(mustCorpus(t), "acp", "multi-turn", "session.jsonl")
	out := filepath.Join(t.TempDir(), "child.jsonl.zstd")
	code, _, errOut := runDsh("log", "fork", "--fixture", "--at", "3", "--out", out, path)
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "OPEN_TURN")

	f, err := session.ParseFile(mustRead(t, path), path)
	require.NoError(t, err)
	var boundary int64 = -1
	for _, e := range f.Events {
		if e.Type() == session.TypeTurnEnd {
			boundary = e.Seq()
			break
		}
	}
	require.Positive(t, boundary)
	code, stdout, errOut := runDsh("log", "fork", "--fixture", "--id", "child-1", "--at", strconv.FormatInt(boundary, 10), "--out", out, path)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, stdout, "session child-1 forked from")

	child, err := session.ReadFile(out)
	require.NoError(t, err)
	require.True(t, child.Compressed)
	require.Equal(t, session.SessionID("child-1"), child.Header.ID)
	require.Equal(t, boundary+1, child.Header.SeedLength.Or(-1))
	require.Len(t, child.Events, int(boundary+2))
	require.Equal(t, session.TypeEndSeed, child.Events[len(child.Events)-1].Type())

	code, _, errOut = runDsh("log", "fork", "--fixture", "--at", "0", "--out", out, path)
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "already exists")
	code, _, _ = runDsh("log", "fork", path)
	require.Equal(t, exitUsage, code)
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return fixtures.Substitute(data)
}
