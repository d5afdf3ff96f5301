package persister

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/testutil"
)

// The databases the reference wrote (testdata/sqlite, see its README):
// every session loads to exactly the manifest's logical events, and dsh,
// fed the same append batches, writes the same physical rows.

const sqliteFixtures = "../../testdata/sqlite"

type sqliteManifest struct {
	Databases map[string]struct {
		File     string `json:"file"`
		Sessions []struct {
			ID             string          `json:"id"`
			Header         json.RawMessage `json:"header"`
			EventCount     int             `json:"eventCount"`
			EventsSha256   string          `json:"eventsSha256"`
			EndsWithTurnEn bool            `json:"endsWithTurnEnd"`
			AppendBatches  [][2]int64      `json:"appendBatches"`
			Revision       int64           `json:"revision"`
			Incarnation    string          `json:"incarnation"`
			Physical       struct {
				Rows       int            `json:"rows"`
				ScalarRows int            `json:"scalarRows"`
				PackedRows map[string]int `json:"packedRows"`
			} `json:"physical"`
		} `json:"sessions"`
	} `json:"databases"`
}

func readSQLiteManifest(t *testing.T) sqliteManifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(sqliteFixtures, "manifest.json"))
	require.NoError(t, err)
	var m sqliteManifest
	require.NoError(t, json.Unmarshal(b, &m))
	require.Len(t, m.Databases, 2)
	return m
}

// copyFixture copies a fixture database into a fresh private directory as
// a 0600 file (the store's permission checks refuse anything wider), so
// that opening it changes nothing under testdata.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	src, err := os.Open(filepath.Join(sqliteFixtures, name))
	require.NoError(t, err)
	defer src.Close()
	dst := filepath.Join(t.TempDir(), name)
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	require.NoError(t, err)
	_, err = io.Copy(f, src)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return dst
}

// canonicalEventsHash is the manifest's eventsSha256 of events.
func canonicalEventsHash(t *testing.T, events []session.Event) string {
	t.Helper()
	lines := make([][]byte, len(events))
	for i, e := range events {
		lines[i] = session.AppendEvent(nil, e)
	}
	sum, err := testutil.EventsSha256(lines)
	require.NoError(t, err)
	return sum
}

// headerJSON is the header as the manifest writes it.
func headerJSON(t *testing.T, h session.Header) string {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(h.JSON().String()), &v))
	delete(v, "type")
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func TestSQLiteFixturesLoadToTheManifestEvents(t *testing.T) {
	m := readSQLiteManifest(t)
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range m.Databases {
			if !yield(k) {
				return
			}
		}
	}) {
		db := m.Databases[name]
		for _, readOnly := range []bool{true, false} {
			if readOnly && len(db.Sessions) == 1 {
				continue // the long session, slow under -race: read-only is covered by public.sqlite
			}
			t.Run(fmt.Sprintf("%s/readOnly=%v", name, readOnly), func(t *testing.T) {
				ctx := t.Context()
				s, err := OpenSQLite(copyFixture(t, db.File), SQLiteOptions{ReadOnly: readOnly})
				require.NoError(t, err)
				defer func() { require.NoError(t, s.Close()) }()
				listed, err := s.List(ctx)
				require.NoError(t, err)
				require.Len(t, listed, len(db.Sessions))
				byID := map[session.SessionID]Listed{}
				for _, l := range listed {
					byID[l.Header.ID] = l
				}
				for _, ms := range db.Sessions {
					id := session.SessionID(ms.ID)
					l, ok := byID[id]
					require.True(t, ok, "session %s listed", id)
					var want any
					require.NoError(t, json.Unmarshal(ms.Header, &want))
					wantHeader, _ := json.Marshal(want)
					require.Equal(t, string(wantHeader), headerJSON(t, l.Header))
					require.Contains(t, string(l.Revision), fmt.Sprintf(":incarnation:%s:revision:%d", ms.Incarnation, ms.Revision))

					events, err := s.ReadFrom(ctx, id, 0)
					require.NoError(t, err)
					require.Len(t, events, ms.EventCount)
					require.Equal(t, ms.EventsSha256, canonicalEventsHash(t, events), "session %s", id)

					in, err := s.Inspect(ctx, id)
					require.NoError(t, err)
					require.Nil(t, in.Torn)
					require.Empty(t, in.Closers, "every fixture session ends with turn/end")
					requireSameEvents(t, events, in.Events)
					if !readOnly {
						loaded, err := s.Load(ctx, id)
						require.NoError(t, err)
						require.Equal(t, in.Revision, loaded.Revision, "a balanced log is not repaired")
					}

					// A read from every offset is the suffix, inside
					// packed rows too.
					offsets := []int{}
					for from := 0; from <= len(events); from++ {
						offsets = append(offsets, from)
					}
					if len(events) > 500 {
						// The long session (a read of it is slow under
						// -race): the starts, middles and ends of its
						// packed rows of each kind and limit, and its last
						// rows.
						offsets = []int{1, 309, 1333, 2356, 2930, 2951, 3001, 3068, 3069, 3089, 3090}
					}
					for _, from := range offsets {
						got, err := s.ReadFrom(ctx, id, int64(from))
						require.NoError(t, err)
						if from == len(events) {
							require.Empty(t, got)
							continue
						}
						requireSameEvents(t, events[from:], got)
					}
				}
			})
		}
	}
}

// physicalRow is a row of the events table in comparable form: data as
// its decompressed text, with whether it was stored as a BLOB.
type physicalRow struct {
	Seq       int64
	Type      string
	Time      int64
	Blob      bool
	Data      string
	Sources   string // hex; "null" for NULL
	SurfaceOp sql.NullString
	Ignorable sql.NullInt64
}

func physicalRows(t *testing.T, path string, id session.SessionID) []physicalRow {
	t.Helper()
	db, err := sql.Open("sqlite", sqlURI(path, "mode=ro"))
	require.NoError(t, err)
	defer db.Close()
	rows, err := db.Query(`SELECT seq, type, time, data, typeof(data), hex(source_event_seqs), typeof(source_event_seqs), surface_op, ignorable FROM events WHERE session_id = ? ORDER BY seq`, string(id))
	require.NoError(t, err)
	defer rows.Close()
	var out []physicalRow
	for rows.Next() {
		var r physicalRow
		var data any
		var dataType, src, srcType string
		require.NoError(t, rows.Scan(&r.Seq, &r.Type, &r.Time, &data, &dataType, &src, &srcType, &r.SurfaceOp, &r.Ignorable))
		r.Blob = dataType == "blob"
		text, err := dataText(sqlValue(data, dataType), sqlMaxScalarData, sqlScalarDecoder())
		require.NoError(t, err)
		r.Data = string(text)
		r.Sources = src
		if srcType == "null" {
			r.Sources = "null"
		}
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// Fed the fixtures' logical events in the batches the reference appended
// them in, dsh writes the same rows: the same packing, the same TEXT or
// BLOB choice, the same data text, provenance bytes, surface_op and
// ignorable; and the same revision count.
func TestSQLiteWritesTheReferenceRows(t *testing.T) {
	m := readSQLiteManifest(t)
	for name, db := range m.Databases {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			ref, err := OpenSQLite(copyFixture(t, db.File), SQLiteOptions{ReadOnly: true})
			require.NoError(t, err)
			defer ref.Close()
			out := filepath.Join(t.TempDir(), "dsh.sqlite")
			s, err := OpenSQLite(out, SQLiteOptions{})
			require.NoError(t, err)
			for _, ms := range db.Sessions {
				id := session.SessionID(ms.ID)
				in, err := ref.Inspect(ctx, id)
				require.NoError(t, err)
				require.NoError(t, s.Create(in.Header))
				for _, b := range ms.AppendBatches {
					require.NoError(t, s.Append(ctx, id, in.Events[b[0]:b[0]+b[1]], Sync))
				}
				listed, err := s.List(ctx)
				require.NoError(t, err)
				found := false
				for _, l := range listed {
					if l.Header.ID == id {
						found = true
						require.Equal(t, in.Header, l.Header)
						require.Regexp(t, fmt.Sprintf(":revision:%d$", ms.Revision), string(l.Revision))
					}
				}
				require.True(t, found)
			}
			require.NoError(t, s.Close())
			for _, ms := range db.Sessions {
				id := session.SessionID(ms.ID)
				want := physicalRows(t, ref.Path(), id)
				got := physicalRows(t, out, id)
				require.Equal(t, len(want), len(got), "session %s rows", id)
				require.Equal(t, ms.Physical.Rows, len(got))
				for i := range want {
					require.Equal(t, want[i], got[i], "session %s row %d", id, i)
				}
			}
		})
	}
}
