package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/internal/testutil"
)

// The SQLite fixtures are databases the reference wrote (testdata/sqlite,
// see its README); manifest.json gives, per session, the event count and
// the SHA-256 of its logical events written as canonical JSON lines.

type fixtureManifest struct {
	Databases map[string]struct {
		Sessions []struct {
			Source       string `json:"source"`
			ID           string `json:"id"`
			EventCount   int    `json:"eventCount"`
			EventsSha256 string `json:"eventsSha256"`
		} `json:"sessions"`
	} `json:"databases"`
}

func readFixtureManifest(t *testing.T) fixtureManifest {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "sqlite", "manifest.json"))
	require.NoError(t, err)
	var m fixtureManifest
	require.NoError(t, json.Unmarshal(data, &m))
	return m
}

// fixtureDB copies a fixture database into a fresh private directory (the
// store refuses a database others may read, and opening one writes beside
// it) and returns its path.
func fixtureDB(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "sqlite", name))
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "db")
	require.NoError(t, os.Mkdir(dir, 0o700))
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

// eventsHash is the manifest's eventsSha256 of `dsh log events` lines.
func eventsHash(t *testing.T, lines []string) string {
	t.Helper()
	events := make([][]byte, len(lines))
	for i, l := range lines {
		events[i] = []byte(l)
	}
	sum, err := testutil.EventsSha256(events)
	require.NoError(t, err)
	return sum
}

// requireManifestEvents checks that every session of the fixture database
// db holds, in store, exactly the manifest's logical events.
func requireManifestEvents(t *testing.T, m fixtureManifest, db, store string) {
	t.Helper()
	sessions := m.Databases[db].Sessions
	require.NotEmpty(t, sessions, db)
	for _, s := range sessions {
		lines := eventLines(t, store, s.ID)
		require.Len(t, lines, s.EventCount, "%s session %s", store, s.ID)
		require.Equal(t, s.EventsSha256, eventsHash(t, lines), "%s session %s", store, s.ID)
	}
}

// dsh log copy of each fixture database to JSONL and back to a new
// database reproduces the manifest's logical events; the long fixture's
// session, holding an ignorable event named text-chunks, is refused for
// JSONL with one line naming the session and the seq, while the other
// sessions of the same database still copy.
func TestLogCopyFixturesThroughJSONL(t *testing.T) {
	m := readFixtureManifest(t)
	public := fixtureDB(t, "public.sqlite")
	requireManifestEvents(t, m, "public.sqlite", "sqlite:"+public)

	jsonl := filepath.Join(t.TempDir(), "jsonl")
	code, out, errOut := runDsh("log", "copy", "--from", "sqlite:"+public, "--to", "jsonl:"+jsonl)
	require.Equal(t, exitOK, code, errOut)
	t.Logf("dsh log copy --from sqlite:public.sqlite --to jsonl:DIR\n%s", out)
	require.Len(t, strings.Split(strings.TrimSuffix(out, "\n"), "\n"), len(m.Databases["public.sqlite"].Sessions))
	requireManifestEvents(t, m, "public.sqlite", "jsonl:"+jsonl)

	back := filepath.Join(t.TempDir(), "back.sqlite")
	code, out, errOut = runDsh("log", "copy", "--from", "jsonl:"+jsonl, "--to", "sqlite:"+back)
	require.Equal(t, exitOK, code, errOut)
	t.Logf("dsh log copy --from jsonl:DIR --to sqlite:back.sqlite\n%s", out)
	requireManifestEvents(t, m, "public.sqlite", "sqlite:"+back)

	// The long fixture: its session loads to the manifest's events, and
	// holds an ignorable event of type text-chunks.
	long := fixtureDB(t, "long.sqlite")
	requireManifestEvents(t, m, "long.sqlite", "sqlite:"+long)
	longID := m.Databases["long.sqlite"].Sessions[0].ID
	seq := -1
	for _, l := range eventLines(t, "sqlite:"+long, longID) {
		var ev struct {
			Type      string `json:"type"`
			Seq       int    `json:"seq"`
			Ignorable bool   `json:"ignorable"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &ev))
		if ev.Type == "text-chunks" {
			require.True(t, ev.Ignorable)
			seq = ev.Seq
		}
	}
	require.NotEqual(t, -1, seq, "the long fixture holds a text-chunks event")

	// The public sessions join it in one database, then all go to JSONL.
	code, _, errOut = runDsh("log", "copy", "--from", "sqlite:"+public, "--to", "sqlite:"+long)
	require.Equal(t, exitOK, code, errOut)
	jsonl2 := filepath.Join(t.TempDir(), "jsonl2")
	code, out, errOut = runDsh("log", "copy", "--from", "sqlite:"+long, "--to", "jsonl:"+jsonl2)
	t.Logf("dsh log copy --from sqlite:long.sqlite (+ the public sessions) --to jsonl:DIR\nstdout:\n%sstderr:\n%s", out, errOut)
	require.Equal(t, exitFailure, code)
	require.Equal(t, "dsh: session "+longID+": seq "+strconv.Itoa(seq)+` is an event of type "text-chunks", which a JSONL log cannot hold (it is the tag of a packed chunk row): not copied to jsonl:`+jsonl2+"\n", errOut)
	require.Len(t, strings.Split(strings.TrimSuffix(out, "\n"), "\n"), len(m.Databases["public.sqlite"].Sessions), "the others copy")
	requireManifestEvents(t, m, "public.sqlite", "jsonl:"+jsonl2)
	code, out, errOut = runDsh("sessions", "--json", "--store", "jsonl:"+jsonl2)
	require.Equal(t, exitOK, code, errOut)
	require.NotContains(t, out, longID, "nothing of the refused session was written")

	// Between databases the long session copies, with the same events.
	long2 := filepath.Join(t.TempDir(), "long2.sqlite")
	code, out, errOut = runDsh("log", "copy", "--from", "sqlite:"+long, "--to", "sqlite:"+long2, "--session", longID)
	require.Equal(t, exitOK, code, errOut)
	t.Logf("dsh log copy --from sqlite:long.sqlite --to sqlite:long2.sqlite --session %s\n%s", longID, out)
	requireManifestEvents(t, m, "long.sqlite", "sqlite:"+long2)
	ids := []string{}
	code, out, _ = runDsh("sessions", "--json", "--store", "sqlite:"+long2)
	require.Equal(t, exitOK, code)
	var rows []sessionRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	require.Equal(t, []string{longID}, slices.Compact(ids))
}

// dsh log events of the corpus logs the public fixture was made from,
// with their placeholders substituted as the fixture's were, prints
// exactly the logical events of the manifest: its lines are the
// reference's own logical events, whatever store they come from.
func TestLogEventsOfTheCorpusMatchTheManifest(t *testing.T) {
	m := readFixtureManifest(t)
	dir := t.TempDir()
	for _, s := range m.Databases["public.sqlite"].Sessions {
		data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "harness", s.Source, "session.jsonl"))
		require.NoError(t, err)
		data = []byte(strings.NewReplacer("{{sessionId}}", s.ID, "{{cwd}}", "/srv/work",
			`"{{system}}"`, `"You are a helpful assistant."`, `"{{tools}}"`, "[]").Replace(string(data)))
		path := filepath.Join(dir, s.ID+".jsonl")
		require.NoError(t, os.WriteFile(path, data, 0o600))
		code, out, errOut := runDsh("log", "events", path)
		require.Equal(t, exitOK, code, errOut)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		require.Len(t, lines, s.EventCount, s.Source)
		require.Equal(t, s.EventsSha256, eventsHash(t, lines), s.Source)
	}
}
