// Package vfs is the file-system seam of the persister: the few operations
// a durable log store needs (writer locks included), an implementation on
// the real OS, an in-memory one (memfs.go) that can inject errors and
// produce a "crash clone" holding only what was synced, for crash-safety
// tests, and a wrapper (killable.go) that simulates kill -9 of the process
// using a file system.
package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
)

// FS is the file system a store writes through. Paths are OS paths.
// Implementations are safe for concurrent use.
type FS interface {
	// OpenFile opens a file like os.OpenFile.
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	// MkdirAll creates a directory and its parents like os.MkdirAll.
	MkdirAll(path string, perm fs.FileMode) error
	// Link makes newname a hard link to oldname; it fails with an error
	// matching fs.ErrExist if newname exists (never overwrites).
	Link(oldname, newname string) error
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// Stat describes a file.
	Stat(name string) (fs.FileInfo, error)
	// ReadDir lists a directory, sorted by name.
	ReadDir(name string) ([]fs.DirEntry, error)
	// SyncDir makes the directory's entries (files created, linked or
	// removed in it) durable.
	SyncDir(name string) error
	// Lock takes the exclusive lock of the file name, creating it (mode 0600) if
	// missing, without waiting: the lock excludes every other Lock of the same
	// file, whether taken by another process or by another Lock call in this
	// one. On success the file's contents are replaced by holder, diagnostic
	// text naming the holder (not synced: it is read only by a writer the lock
	// refuses). A file locked already fails with an error matching ErrLocked,
	// from which LockHolder reads the holder text found in it. holder is not
	// retained. Release empties the file before it lets go, so the text names
	// the current holder only (the OS implementation waits briefly for the text
	// of a holder that has just taken the lock).
	//
	// A lock file is never to be removed: a process that opened the old
	// inode could lock it while another locks a new file under the same
	// name, and both would believe they hold the lock.
	Lock(name string, holder []byte) (Lock, error)
}

// Lock is a held file lock (FS.Lock). Implementations are safe for
// concurrent use.
type Lock interface {
	// Release gives the lock up, closing its descriptor. Idempotent.
	Release() error
}

// ErrLocked says a file is locked by another holder. Match it with
// errors.Is; LockHolder reads the holder's text from the error.
var ErrLocked = errors.New("vfs: file is locked")

// LockHolder reports whether err is FS.Lock's refusal of a file another
// holder has locked, and the text that holder wrote into the file,
// trimmed of surrounding white space. The text may be empty, or stale
// when the holder is writing it at the instant it is read. The store
// above turns it into its own error, which names the session as well.
func LockHolder(err error) (holder string, locked bool) {
	var le *lockedError
	if !errors.As(err, &le) {
		return "", false
	}
	return le.holder, true
}

// lockedError refuses FS.Lock of a file locked by another holder.
// errors.Is(err, ErrLocked) holds.
type lockedError struct {
	path   string
	holder string
}

func (e *lockedError) Error() string {
	holder := e.holder
	if holder == "" {
		holder = "an unnamed holder"
	}
	return fmt.Sprintf("vfs: %s is locked by %s", e.path, holder)
}

// Is makes every lockedError match ErrLocked.
func (e *lockedError) Is(target error) bool { return target == ErrLocked }

// File is an open file.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.Closer
	// Sync makes the file's contents durable.
	Sync() error
	// Truncate changes the file's size.
	Truncate(size int64) error
	// Stat describes the file.
	Stat() (fs.FileInfo, error)
}

// Compile-time checks of the implementations of FS.
var (
	_ FS = (*MemFS)(nil)
	_ FS = osFS{}
)
