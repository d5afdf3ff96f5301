package vfs

import (
	"errors"
	"io/fs"
	"sync"
)

// ErrKilled is the error of every operation through a KillableFS after
// Kill. Match it with errors.Is.
var ErrKilled = errors.New("vfs: process killed")

// KillableFS wraps an FS so that one test process can simulate kill -9 of
// one of the processes it plays (a cluster member): Kill closes every File
// and releases every Lock opened through it, as the kernel does for a
// dying process, and fails every later operation, on the FS or on a File
// or Lock opened before, with ErrKilled. What completed before Kill stays
// (a killed process keeps its writes in the page cache; only a crash of
// the machine loses unsynced data, which is MemFS.CrashClone's business).
// It is safe for concurrent use: an operation racing with Kill either
// completes before it or fails after it.
type KillableFS struct {
	inner FS

	// kill is held shared by every operation for its whole duration and
	// exclusively by Kill, which so waits for the operations in progress
	// and is the point after which none starts. Order: kill before mu.
	kill   sync.RWMutex
	killed bool // written under kill held exclusively, read under it shared

	mu   sync.Mutex            // guards open
	open map[killable]struct{} // Files and Locks not yet closed or released
}

// killable is a File or Lock of a KillableFS, closed by Kill.
type killable interface{ shut() }

// Killable returns inner wrapped so that it can be killed.
func Killable(inner FS) *KillableFS {
	return &KillableFS{inner: inner, open: map[killable]struct{}{}}
}

// Kill closes every File and releases every Lock opened through k and
// still open, and makes every later operation fail with ErrKilled. It
// waits for the operations in progress. Idempotent.
func (k *KillableFS) Kill() {
	k.kill.Lock()
	defer k.kill.Unlock()
	if k.killed {
		return
	}
	k.killed = true
	k.mu.Lock()
	open := k.open
	k.open = nil
	k.mu.Unlock()
	for h := range open {
		h.shut()
	}
}

// enter starts an operation: it holds kill shared, or fails once killed.
// On nil the caller must call k.kill.RUnlock when the operation is done.
func (k *KillableFS) enter(op, name string) error {
	k.kill.RLock()
	if k.killed {
		k.kill.RUnlock()
		return pathErr(op, name, ErrKilled)
	}
	return nil
}

// track records h as open; forget as closed. Called with kill held shared.
func (k *KillableFS) track(h killable) {
	k.mu.Lock()
	k.open[h] = struct{}{}
	k.mu.Unlock()
}

func (k *KillableFS) forget(h killable) {
	k.mu.Lock()
	delete(k.open, h)
	k.mu.Unlock()
}

func (k *KillableFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	if err := k.enter("open", name); err != nil {
		return nil, err
	}
	defer k.kill.RUnlock()
	f, err := k.inner.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	kf := &killableFile{k: k, f: f, name: name}
	k.track(kf)
	return kf, nil
}

func (k *KillableFS) MkdirAll(path string, perm fs.FileMode) error {
	if err := k.enter("mkdir", path); err != nil {
		return err
	}
	defer k.kill.RUnlock()
	return k.inner.MkdirAll(path, perm)
}

func (k *KillableFS) Link(oldname, newname string) error {
	if err := k.enter("link", newname); err != nil {
		return err
	}
	defer k.kill.RUnlock()
	return k.inner.Link(oldname, newname)
}

func (k *KillableFS) Remove(name string) error {
	if err := k.enter("remove", name); err != nil {
		return err
	}
	defer k.kill.RUnlock()
	return k.inner.Remove(name)
}

func (k *KillableFS) Stat(name string) (fs.FileInfo, error) {
	if err := k.enter("stat", name); err != nil {
		return nil, err
	}
	defer k.kill.RUnlock()
	return k.inner.Stat(name)
}

func (k *KillableFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if err := k.enter("readdir", name); err != nil {
		return nil, err
	}
	defer k.kill.RUnlock()
	return k.inner.ReadDir(name)
}

func (k *KillableFS) SyncDir(name string) error {
	if err := k.enter("syncdir", name); err != nil {
		return err
	}
	defer k.kill.RUnlock()
	return k.inner.SyncDir(name)
}

func (k *KillableFS) Lock(name string, holder []byte) (Lock, error) {
	if err := k.enter("lock", name); err != nil {
		return nil, err
	}
	defer k.kill.RUnlock()
	l, err := k.inner.Lock(name, holder)
	if err != nil {
		return nil, err
	}
	kl := &killableLock{k: k, l: l, name: name}
	k.track(kl)
	return kl, nil
}

// killableFile is a File of a KillableFS.
type killableFile struct {
	k    *KillableFS
	f    File
	name string
}

func (f *killableFile) shut() { _ = f.f.Close() }

func (f *killableFile) Read(p []byte) (int, error) {
	if err := f.k.enter("read", f.name); err != nil {
		return 0, err
	}
	defer f.k.kill.RUnlock()
	return f.f.Read(p)
}

func (f *killableFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.k.enter("read", f.name); err != nil {
		return 0, err
	}
	defer f.k.kill.RUnlock()
	return f.f.ReadAt(p, off)
}

func (f *killableFile) Write(p []byte) (int, error) {
	if err := f.k.enter("write", f.name); err != nil {
		return 0, err
	}
	defer f.k.kill.RUnlock()
	return f.f.Write(p)
}

func (f *killableFile) Sync() error {
	if err := f.k.enter("sync", f.name); err != nil {
		return err
	}
	defer f.k.kill.RUnlock()
	return f.f.Sync()
}

func (f *killableFile) Truncate(size int64) error {
	if err := f.k.enter("truncate", f.name); err != nil {
		return err
	}
	defer f.k.kill.RUnlock()
	return f.f.Truncate(size)
}

func (f *killableFile) Stat() (fs.FileInfo, error) {
	if err := f.k.enter("stat", f.name); err != nil {
		return nil, err
	}
	defer f.k.kill.RUnlock()
	return f.f.Stat()
}

func (f *killableFile) Close() error {
	if err := f.k.enter("close", f.name); err != nil {
		return err
	}
	defer f.k.kill.RUnlock()
	f.k.forget(f)
	return f.f.Close()
}

// killableLock is a Lock of a KillableFS.
type killableLock struct {
	k    *KillableFS
	l    Lock
	name string
}

func (l *killableLock) shut() { _ = l.l.Release() }

func (l *killableLock) Release() error {
	if err := l.k.enter("release", l.name); err != nil {
		return err
	}
	defer l.k.kill.RUnlock()
	l.k.forget(l)
	return l.l.Release()
}

// Compile-time check that KillableFS is an FS.
var _ FS = (*KillableFS)(nil)
