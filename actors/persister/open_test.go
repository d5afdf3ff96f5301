package persister

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseStoreURL(t *testing.T) {
	for _, tc := range []struct {
		url          string
		scheme, path string
	}{
		{"jsonl:/data/dsh", SchemeJSONL, "/data/dsh"},
		{"jsonl:rel/dir", SchemeJSONL, "rel/dir"},
		{"/data/dsh", SchemeJSONL, "/data/dsh"}, // a bare path is a JSONL directory
		{"rel", SchemeJSONL, "rel"},
		{"./odd:name", SchemeJSONL, "./odd:name"},   // not a scheme's shape
		{"jsonl:odd:name", SchemeJSONL, "odd:name"}, // the colon belongs to the path
		{`C:\dsh`, SchemeJSONL, `C:\dsh`},           // a drive letter, not a scheme
		{"sqlite:/data/dsh.db", SchemeSQLite, "/data/dsh.db"},
		{"sqlite:dsh.db", SchemeSQLite, "dsh.db"},
	} {
		loc, err := ParseStoreURL(tc.url)
		require.NoError(t, err, tc.url)
		require.Equal(t, Location{Scheme: tc.scheme, Path: tc.path}, loc, tc.url)
	}
	for _, tc := range []struct{ url, says string }{
		{"", "empty path"},
		{"jsonl:", "empty path"},
		{"sqlite:", "empty path"},
		{"sqlit:x.db", `unknown scheme "sqlit"`},
		{"postgres://host/db", `unknown scheme "postgres"`},
	} {
		_, err := ParseStoreURL(tc.url)
		require.ErrorIs(t, err, ErrStoreURL, tc.url)
		require.ErrorContains(t, err, tc.says, tc.url)
		var ue *storeURLError
		require.ErrorAs(t, err, &ue)
		require.Equal(t, tc.url, ue.URL)
	}
	// Open and OpenReader refuse what does not parse, touching nothing.
	dir := t.TempDir()
	_, err := Open("nope:" + dir)
	require.ErrorIs(t, err, ErrStoreURL)
	_, err = OpenReader("jsonl:")
	require.ErrorIs(t, err, ErrStoreURL)
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, ents)
}

// Open opens a JSONL directory for writing with the writer locks on, by
// URL or bare path; OpenReader reads it without taking any lock, and
// refuses to repair.
func TestOpenJSONL(t *testing.T) {
	dir := t.TempDir()
	w, err := Open("jsonl:" + dir)
	require.NoError(t, err)
	defer w.Close()
	b := newJL(t, "s-open")
	b.textTurn("one", 5)
	require.NoError(t, w.Create(b.header()))
	require.NoError(t, w.Append(t.Context(), b.id(), b.events(), Sync))
	require.FileExists(t, filepath.Join(sessionDir(dir, b.header()), zstdArtifact), "the default encoding")

	// w holds the session's writer lock: a second writer by bare path is
	// refused, naming the holder.
	w2, err := Open(dir)
	require.NoError(t, err)
	defer w2.Close()
	more := newJL(t, "s-open") // the same id, to try an append past w's events
	more.textTurn("one", 5)
	more.textTurn("two", 3)
	err = w2.Append(t.Context(), b.id(), more.from(b.len()), Sync)
	var le *LockedError
	require.ErrorAs(t, err, &le, "Open must take the writer locks")

	// A reader reads while the writer holds the lock.
	r, err := OpenReader("jsonl:" + dir)
	require.NoError(t, err)
	defer r.Close()
	listed, err := r.List(t.Context())
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, b.id(), listed[0].Header.ID)
	got, err := r.Inspect(t.Context(), b.id())
	require.NoError(t, err)
	requireSameEvents(t, b.events(), got.Events)
	_, err = r.Load(t.Context(), b.id())
	require.ErrorIs(t, err, ErrReadOnly)
	_, isWriter := r.(Writer)
	require.False(t, isWriter, "a reader must not offer writes")
}

// Open keeps the encoding a directory holds: a root of plain logs goes on
// with plain logs.
func TestOpenJSONLKeepsPlain(t *testing.T) {
	dir := t.TempDir()
	p, err := NewJSONLStore(JSONLConfig{Root: dir, Plain: true})
	require.NoError(t, err)
	b := newJL(t, "s-plain")
	b.textTurn("one", 3)
	require.NoError(t, p.Create(b.header()))
	require.NoError(t, p.Append(t.Context(), b.id(), b.events(), Sync))
	require.NoError(t, p.Close())

	s, err := Open(dir)
	require.NoError(t, err)
	c := newJL(t, "s-plain-2")
	c.textTurn("two", 3)
	require.NoError(t, s.Create(c.header()))
	require.NoError(t, s.Append(t.Context(), c.id(), c.events(), Sync))
	require.NoError(t, s.Close())
	require.FileExists(t, filepath.Join(sessionDir(dir, c.header()), plainArtifact))
}

// OpenReader wants an existing directory: a listing of a misspelt path
// says so instead of showing an empty store.
func TestOpenReaderMissing(t *testing.T) {
	dir := t.TempDir()
	_, err := OpenReader(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, "missing")
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err = OpenReader("jsonl:" + file)
	require.ErrorContains(t, err, "not a directory")
}

// Open opens a SQLite database for writing, creating it, and holds its
// writer lock; OpenReader reads it meanwhile, without the lock, and
// refuses to repair; a reader of a missing database creates nothing.
func TestOpenSQLite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dsh.db")
	_, err := OpenReader("sqlite:" + path)
	require.Error(t, err)
	require.NoFileExists(t, path, "a reader creates nothing")

	w, err := Open("sqlite:" + path)
	require.NoError(t, err)
	defer w.Close()
	require.IsType(t, &SQLiteStore{}, w)
	b := newJL(t, "s-sqlite")
	b.textTurn("one", 5)
	require.NoError(t, w.Create(b.header()))
	require.NoError(t, w.Append(t.Context(), b.id(), b.events(), Sync))

	_, err = Open("sqlite:" + path)
	require.ErrorIs(t, err, ErrLocked, "a second writer is refused")

	r, err := OpenReader("sqlite:" + path)
	require.NoError(t, err)
	defer r.Close()
	listed, err := r.List(t.Context())
	require.NoError(t, err)
	require.Len(t, listed, 1)
	got, err := r.Inspect(t.Context(), b.id())
	require.NoError(t, err)
	requireSameEvents(t, b.events(), got.Events)
	_, err = r.Load(t.Context(), b.id())
	require.ErrorIs(t, err, ErrReadOnly)
	_, isWriter := r.(Writer)
	require.False(t, isWriter, "a reader must not offer writes")
}
