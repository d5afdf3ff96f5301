package persister

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/dshgo/dsh/actors/session"
)

// This file names stores by URL, for the command line and for embedders
// that take a store from their own configuration:
//
//	jsonl:DIR     the JSONL store rooted at DIR (doc.go)
//	DIR           the same: a bare path is a JSONL directory
//	sqlite:PATH   the SQLite store in the database file PATH (SQLiteStore)
//
// A path may itself hold a colon: a bare path whose text before the first
// colon looks like a scheme ("foo:bar") is refused as an unknown scheme
// rather than taken for a directory, so that a misspelt scheme
// ("sqlit:x.db") never quietly becomes a JSONL directory named after it;
// write "jsonl:foo:bar" or "./foo:bar" for such a directory.

// The store URL schemes.
const (
	SchemeJSONL  = "jsonl"
	SchemeSQLite = "sqlite"
)

// ErrStoreURL says a store URL names no store: its scheme is unknown or its
// path is empty. The error names the URL and what is wrong with it.
var ErrStoreURL = errors.New("persister: bad store URL")

// ErrReadOnly refuses a write through a store opened for reading only
// (OpenReader): Load, which commits crash repair, is such a write.
var ErrReadOnly = errors.New("persister: store opened read-only")

// storeURLError is a store URL that names no store. errors.Is(err,
// ErrStoreURL) holds.
type storeURLError struct {
	URL    string
	Reason string
}

func (e *storeURLError) Error() string {
	return fmt.Sprintf("persister: store URL %q: %s", e.URL, e.Reason)
}

// Is makes every storeURLError match ErrStoreURL.
func (e *storeURLError) Is(target error) bool { return target == ErrStoreURL }

// Location is a parsed store URL.
type Location struct {
	Scheme string // SchemeJSONL or SchemeSQLite
	Path   string // the directory or the database file, as given
}

// String returns the location as a URL, with its scheme.
func (l Location) String() string { return l.Scheme + ":" + l.Path }

// ParseStoreURL parses a store URL (see the top of open.go). It does no
// I/O: whether the path exists is the opener's business.
func ParseStoreURL(url string) (Location, error) {
	scheme, path, found := strings.Cut(url, ":")
	if !found || !isScheme(scheme) {
		// A bare path. (A single letter before the colon is a Windows
		// drive, "C:\dsh", not a scheme.)
		scheme, path = SchemeJSONL, url
	}
	switch scheme {
	case SchemeJSONL, SchemeSQLite:
	default:
		return Location{}, &storeURLError{URL: url, Reason: fmt.Sprintf(
			"unknown scheme %q (want jsonl:DIR or sqlite:PATH; a directory whose name has a colon is jsonl:%s)", scheme, url)}
	}
	if path == "" {
		return Location{}, &storeURLError{URL: url, Reason: "empty path (want jsonl:DIR or sqlite:PATH)"}
	}
	return Location{Scheme: scheme, Path: path}, nil
}

// isScheme reports whether s has the shape of a URL scheme of two or more
// characters: a letter, then letters, digits, '+', '-' or '.'.
func isScheme(s string) bool {
	if len(s) < 2 {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// Open opens the store url names for writing: the JSONL store (taking
// each session's writer lock before writing it, JSONLConfig.Lock, in the
// encoding the directory already holds: zstd unless it holds plain logs),
// or the SQLite store (holding the database's writer lock). The caller
// closes it (a supervisor.Host closes the store it is given).
func Open(url string) (Store, error) {
	loc, err := ParseStoreURL(url)
	if err != nil {
		return nil, err
	}
	switch loc.Scheme {
	case SchemeSQLite:
		return openSQLiteURL(loc, false)
	default:
		return openJSONLDir(loc.Path, true)
	}
}

// OpenReader opens the store url names for reading only, without any
// writer lock, so that it can be read while a writer holds the store: a
// listing, an inspection. Nothing it does changes the store: Load, which
// commits crash repair, fails with ErrReadOnly (Inspect computes the same
// repair in memory). A JSONL directory must exist.
func OpenReader(url string) (Reader, error) {
	loc, err := ParseStoreURL(url)
	if err != nil {
		return nil, err
	}
	if loc.Scheme == SchemeSQLite {
		s, err := openSQLiteURL(loc, true)
		if err != nil {
			return nil, err
		}
		return readOnly{s}, nil
	}
	fi, err := os.Stat(loc.Path)
	if err != nil {
		return nil, fmt.Errorf("persister: open %s: %w", loc, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("persister: open %s: not a directory", loc)
	}
	s, err := openJSONLDir(loc.Path, false)
	if err != nil {
		return nil, err
	}
	return readOnly{s}, nil
}

// openJSONLDir opens the JSONL store at dir in whichever encoding it holds
// already: zstd, unless the root holds plain logs (ErrLayout for zstd).
func openJSONLDir(dir string, lock bool) (*JSONLStore, error) {
	s, err := NewJSONLStore(JSONLConfig{Root: dir, Lock: lock})
	if err == nil || !errors.Is(err, ErrLayout) {
		return s, err
	}
	plain, perr := NewJSONLStore(JSONLConfig{Root: dir, Plain: true, Lock: lock})
	if perr != nil {
		return nil, err // the zstd store's refusal says what the root holds
	}
	return plain, nil
}

// openSQLiteURL opens the SQLite store of loc: a writer holds the
// database's writer lock (SQLiteStore); a reader takes none, and needs the
// database to exist.
func openSQLiteURL(loc Location, readOnly bool) (Store, error) {
	s, err := OpenSQLite(loc.Path, SQLiteOptions{ReadOnly: readOnly})
	if err != nil {
		return nil, err // not a nil *SQLiteStore in a non-nil Store
	}
	return s, nil
}

// readOnly is a Reader that refuses Load.
type readOnly struct{ Reader }

func (r readOnly) Load(context.Context, session.SessionID) (Stored, error) {
	return Stored{}, ErrReadOnly
}
