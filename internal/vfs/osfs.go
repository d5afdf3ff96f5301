package vfs

import (
	"errors"
	"io"
	"io/fs"
	"os"
)

// OS returns the real operating-system file system. It is safe for
// concurrent use (every call goes straight to the os package).
func OS() FS { return osFS{} }

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		// Return a nil interface, not a typed nil *os.File.
		return nil, err
	}
	return f, nil
}

func (osFS) MkdirAll(path string, perm fs.FileMode) error { return os.MkdirAll(path, perm) }

// Link uses link(2), which fails with EEXIST (matching fs.ErrExist) rather
// than replace newname.
func (osFS) Link(oldname, newname string) error { return os.Link(oldname, newname) }

func (osFS) Remove(name string) error { return os.Remove(name) }

func (osFS) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }

func (osFS) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }

// SyncDir opens the directory and fsyncs it, which on POSIX file systems
// makes the entries created, linked or removed in it durable. Without it a
// file fsynced after creation can still vanish in a power loss: the data is
// on disk but the name pointing at it is not.
func (osFS) SyncDir(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// ReadFile reads the whole file name through fsys. The returned slice is
// owned by the caller.
func ReadFile(fsys FS, name string) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	var size int64
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	// One more byte than the size, so that a file that did not grow is
	// read to EOF without a second allocation.
	buf := make([]byte, 0, size+1)
	for {
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			_ = f.Close()
			return nil, err
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return buf, nil
}
