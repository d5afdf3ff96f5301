// Package vfs is the file-system seam of the persister: the few operations
// a durable log store needs, an implementation on the real OS, and (in
// memfs.go) an in-memory one that can inject errors and produce a "crash
// clone" holding only what was synced, for crash-safety tests.
package vfs

import (
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
}

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
