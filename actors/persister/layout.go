package persister

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/dshgo/dsh/actors/session"
)

// This file is the directory layout of the JSONL store
// (docs/log-format.md#jsonl-files):
//
//	<root>/<projectKey(cwd)>/<EncodeSegment(id)>/session.jsonl.zstd   (default)
//	<root>/<projectKey(cwd)>/<EncodeSegment(id)>/session.jsonl        (Plain)
//	<root>/_no-cwd/<EncodeSegment(id)>/...                            (no cwd)
//
// beside which a session directory may hold "<artifact>.<hex>.tmp" files
// that a crash left before their first write was published, which are
// ignored, and the writer lock session.lock (JSONLConfig.Lock; doc.go,
// "Writer fencing"), which is never removed and is not part of the log: a
// directory holding a lock file and no artifact (a first append that
// failed, or lost a race) is not a session, and nothing that walks the
// root reads lock files. A root holds one encoding only, and the obsolete
// flat layout <root>/<project>/<id>.jsonl[.zstd] is refused rather than
// silently ignored, so that an old root is never half-read.

// The names of the layout.
const (
	zstdArtifact  = "session.jsonl.zstd"
	plainArtifact = "session.jsonl"
	noCwdProject  = "_no-cwd"
	lockName      = "session.lock"
	maxSlug       = 251
)

// ErrLayout reports a root that is not laid out the way this store writes
// it: the other encoding (.jsonl beside .jsonl.zstd or the reverse), the
// obsolete flat layout, a header stored under a path it does not map to,
// or one id stored twice. Match it with errors.Is.
var ErrLayout = errors.New("persister: root holds another layout")

// projectKey returns the directory name of the project of a working
// directory: "--<slug>--", where the slug is cwd with every run of the
// separators / \ : replaced by one "-", every UTF-16 code unit outside
// [A-Za-z0-9._-] written as "~XXXX" (four uppercase hex digits), leading
// "-" stripped, "root" if that leaves nothing, and cut to 251 characters.
// The key is a readable grouping, not an identity (cwds "/a:b" and "/a/b"
// share it); the session directory below it and the header's cwd are what
// identify a session. An empty cwd (a session without one) maps to
// "_no-cwd".
func projectKey(cwd string) string {
	if cwd == "" {
		return noCwdProject
	}
	b := make([]byte, 0, len(cwd)+4)
	inSep := false
	codeUnits(cwd, func(u uint16) {
		if u == '/' || u == '\\' || u == ':' {
			if !inSep {
				b = append(b, '-')
			}
			inSep = true
			return
		}
		inSep = false
		b = appendUnit(b, u)
	})
	slug := strings.TrimLeft(string(b), "-")
	if slug == "" {
		slug = "root"
	}
	if len(slug) > maxSlug {
		slug = slug[:maxSlug] // ASCII by construction: bytes are characters
	}
	return "--" + slug + "--"
}

// EncodeSegment returns the directory name of a session id, injectively:
// every UTF-16 code unit outside [A-Za-z0-9._-] ("~" included, which makes
// every "~" of the result the start of an escape) is written "~XXXX", and
// the names "." and ".." become "~002E" and "~002E~002E". So distinct ids
// never share a directory, and no id escapes its project directory.
//
// Go strings may hold bytes that are not UTF-8, which a JavaScript string
// (the reference's) cannot. Such a byte b is written as the lone low
// surrogate U+DC00+b ("~DC80".."~DCFF"), Python's surrogateescape: valid
// UTF-8 never yields a lone surrogate, so the encoding stays injective and
// is the reference's on every valid id.
func EncodeSegment(id string) string {
	switch id {
	case ".":
		return "~002E"
	case "..":
		return "~002E~002E"
	}
	b := make([]byte, 0, len(id))
	codeUnits(id, func(u uint16) { b = appendUnit(b, u) })
	return string(b)
}

// codeUnits calls fn with each UTF-16 code unit of s, and with U+DC00+b for
// each byte b that is not part of valid UTF-8.
func codeUnits(s string, fn func(u uint16)) {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fn(0xDC00 | uint16(s[i]))
		case r >= 0x10000:
			hi, lo := utf16.EncodeRune(r)
			fn(uint16(hi))
			fn(uint16(lo))
		default:
			fn(uint16(r))
		}
		i += size
	}
}

// appendUnit appends u itself when it is in [A-Za-z0-9._-], else ~XXXX.
func appendUnit(b []byte, u uint16) []byte {
	switch {
	case 'a' <= u && u <= 'z', 'A' <= u && u <= 'Z', '0' <= u && u <= '9', u == '.', u == '_', u == '-':
		return append(b, byte(u))
	}
	const hex = "0123456789ABCDEF"
	return append(b, '~', hex[u>>12], hex[u>>8&0xF], hex[u>>4&0xF], hex[u&0xF])
}

// sessionDir returns the directory of a session under root.
func sessionDir(root string, h session.Header) string {
	return filepath.Join(root, projectKey(h.Cwd), EncodeSegment(string(h.ID)))
}

// isFlatArtifact reports whether a file name directly in a project
// directory belongs to the obsolete flat layout <project>/<id>.jsonl*.
func isFlatArtifact(name string) bool {
	return strings.HasSuffix(name, ".jsonl") || strings.HasSuffix(name, ".jsonl.zstd")
}

// fileRevision returns the revision token of a stored artifact: the
// reference's dev:ino:size:mtimeNs:ctimeNs where the platform reports an
// inode, else size:mtimeNs. Inode and device make a replaced file (same
// size and time, another inode) a new revision.
func fileRevision(fi fs.FileInfo) Revision {
	size, mtime := fi.Size(), fi.ModTime().UnixNano()
	if dev, ino, ctime, ok := inodeOf(fi.Sys()); ok {
		return Revision(fmt.Sprintf("%d:%d:%d:%d:%d", dev, ino, size, mtime, ctime))
	}
	return Revision(fmt.Sprintf("%d:%d", size, mtime))
}

// inodeOf reads Dev, Ino and the change time out of a FileInfo's Sys()
// value. It uses reflection because the store has no per-platform files:
// syscall.Stat_t differs between Unix systems (Dev is uint64 on Linux,
// int32 on Darwin; the change time is Ctim or Ctimespec) and does not
// exist on Windows, where Sys() holds no inode and the revision falls back
// to size and modification time. The alternative, build-tagged files per
// platform, is more code to keep in step for the same four fields.
func inodeOf(sys any) (dev, ino uint64, ctimeNs int64, ok bool) {
	v := reflect.ValueOf(sys)
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return 0, 0, 0, false
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return 0, 0, 0, false
	}
	d, okd := intField(v, "Dev")
	i, oki := intField(v, "Ino")
	if !okd || !oki {
		return 0, 0, 0, false
	}
	for _, name := range []string{"Ctim", "Ctimespec"} {
		if ts := v.FieldByName(name); ts.IsValid() && ts.Kind() == reflect.Struct {
			sec, oks := intField(ts, "Sec")
			nsec, okn := intField(ts, "Nsec")
			if oks && okn {
				ctimeNs = int64(sec)*1e9 + int64(nsec)
			}
			break
		}
	}
	return d, i, ctimeNs, true
}

// intField returns the integer field name of the struct v.
func intField(v reflect.Value, name string) (uint64, bool) {
	f := v.FieldByName(name)
	if !f.IsValid() {
		return 0, false
	}
	switch f.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return uint64(f.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return f.Uint(), true
	}
	return 0, false
}
