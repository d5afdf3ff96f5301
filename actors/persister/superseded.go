package persister

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dshgo/dsh/internal/vfs"
)

// A session that a newer release of the reference migrated
// (docs/log-format.md, "Superseded sessions"): that release writes format
// versions above 0 to a new file beside the old one,
// session.vN.jsonl[.zstd] with N >= 1, leaves session.jsonl[.zstd] as it
// was and from then on uses only its newest file. This build reads format
// 0, so it must neither read the stale file as the session nor append to
// it: the two histories would diverge. Every way to open such a session
// (load, resume, append, repair, fork) is refused.

// ErrSuperseded matches a *SupersededError.
var ErrSuperseded = errors.New("persister: session migrated to a newer format")

// SupersededError refuses a format-0 log whose directory holds a newer
// format's file.
type SupersededError struct {
	Path    string // the format-0 log
	Newer   string // the newest file beside it
	Version int64  // its format version (N of session.vN)
}

func (e *SupersededError) Error() string {
	return fmt.Sprintf("%s is superseded by %s (format version %d, written by a newer reference); this build reads format 0 only",
		e.Path, e.Newer, e.Version)
}

// Is makes errors.Is(err, ErrSuperseded) hold.
func (e *SupersededError) Is(target error) bool { return target == ErrSuperseded }

// newerVersion parses the name of a newer format's log,
// session.vN.jsonl or session.vN.jsonl.zstd with N a decimal integer >= 1.
func newerVersion(name string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, "session.v")
	if !ok {
		return 0, false
	}
	digits, ok := strings.CutSuffix(rest, ".jsonl")
	if !ok {
		if digits, ok = strings.CutSuffix(rest, ".jsonl.zstd"); !ok {
			return 0, false
		}
	}
	if digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}

// Superseded returns a *SupersededError when the directory of the log at
// path holds a newer format's log (the newest one is named), nil when it
// holds none or does not exist.
func Superseded(path string) error { return superseded(vfs.OS(), path) }

// superseded is Superseded on fsys.
func superseded(fsys vfs.FS, path string) error {
	entries, err := fsys.ReadDir(filepath.Dir(path))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("persister: look for a newer format beside %s: %w", path, err)
	}
	var newest string
	var version int64
	for _, e := range entries {
		if n, ok := newerVersion(e.Name()); ok && !e.IsDir() && (n > version || n == version && e.Name() > newest) {
			newest, version = e.Name(), n
		}
	}
	if newest == "" {
		return nil
	}
	return &SupersededError{Path: path, Newer: filepath.Join(filepath.Dir(path), newest), Version: version}
}
