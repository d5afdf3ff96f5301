package vfs

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"
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
	err = fsyncOS(d)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Lock takes an exclusive, non-blocking lock of the whole file (lockFile:
// an open-file-description lock on Linux, flock(2) on other Unix systems).
// Both belong to the open file description, not to the process, so two
// Locks in one process exclude each other (plain POSIX fcntl locks would
// not: they are per process, and closing any descriptor of the file drops
// them), and the kernel drops them when the process dies.
func (osFS) Lock(name string, holder []byte) (Lock, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := lockFile(f); err != nil {
		var text string
		if errors.Is(err, errLockHeld) {
			text = awaitHolder(f)
		}
		_ = f.Close() // never locked: closing releases nothing
		if errors.Is(err, errLockHeld) {
			return nil, &lockedError{path: name, holder: text}
		}
		return nil, &fs.PathError{Op: "lock", Path: name, Err: err}
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt(holder, 0)
	}
	if err != nil {
		_ = f.Close() // releases the lock
		// A *fs.PathError already names the file and what failed
		// ("write NAME: ..."); wrapped again it would name it twice.
		if _, ok := err.(*fs.PathError); !ok {
			err = &fs.PathError{Op: "lock", Path: name, Err: err}
		}
		return nil, err
	}
	return &osLock{f: f}, nil
}

// errLockHeld is what lockFile returns for a file locked by another
// holder.
var errLockHeld = errors.New("lock held elsewhere")

// maxHolder bounds the holder text read from a lock file.
const maxHolder = 4 << 10

// Waiting for the text of a holder that has just taken its lock.
const (
	holderPolls    = 100
	holderPollWait = time.Millisecond
)

// awaitHolder returns the holder text of a file locked by another holder.
// A holder writes its text right after it takes the lock and empties the
// file before it lets go (osLock.Release), so an empty file under a held
// lock means a holder that has not written yet: it is read again, for
// about holderPolls × holderPollWait at most, rather than reported
// unnamed. (The text of a holder that died is still there when the next
// one locks; only a refusal in the instant before it is overwritten can
// name the dead one.)
func awaitHolder(f *os.File) string {
	text := readHolder(f)
	for range holderPolls {
		if text != "" {
			break
		}
		time.Sleep(holderPollWait)
		text = readHolder(f)
	}
	return text
}

// readHolder returns the holder text of a locked file: its first bytes,
// trimmed. The holder may be rewriting it this instant, so the text is
// diagnostic only; a read error yields what was read.
func readHolder(f *os.File) string {
	buf := make([]byte, maxHolder)
	n, _ := f.ReadAt(buf, 0)
	return strings.TrimSpace(string(bytes.ToValidUTF8(buf[:n], []byte("?"))))
}

// osLock is a lock held through an open file. The *os.File must stay
// referenced while the lock is held: its finalizer would close the
// descriptor, and with it the lock, if the Lock were garbage collected.
type osLock struct {
	mu sync.Mutex // guards f
	f  *os.File   // nil once released
}

func (l *osLock) Release() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	// Empty the text while still holding the lock, so that the file never
	// names a holder that let go (see awaitHolder). A failure here costs
	// only a stale diagnostic.
	_ = l.f.Truncate(0)
	err := l.f.Close()
	l.f = nil
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
