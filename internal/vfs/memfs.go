package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// MemFS is an in-memory FS for crash-safety tests, in the spirit of
// pebble's vfs.MemFS and errorfs. It is safe for concurrent use.
//
// It models what a crash keeps, POSIX-style, at the granularity a store
// can rely on:
//
//   - every file (inode) has its current bytes and its synced bytes;
//     File.Sync copies the current bytes to the synced ones;
//   - every directory has its current entries and its durable entries;
//     SyncDir copies the current entries to the durable ones. Creating,
//     linking or removing a name (MkdirAll included: a new directory is an
//     entry of its parent) changes only the current entries.
//
// CrashClone returns what a power loss at this instant would leave: the
// tree reachable from the root through durable entries only, each file
// holding its synced bytes. A file whose name was never made durable is
// gone even if its data was synced; a file whose name is durable but whose
// data was never synced is empty (or holds its older synced bytes).
//
// The model is deliberately simple but honest: it never keeps more than a
// real file system guarantees. It does not model the reverse (a real file
// system may keep unsynced data too), so a test passing on MemFS proves
// the store depends only on what it synced.
//
// InjectError installs a hook consulted before every operation; it can
// fail any operation at any point, cut a write short (ShortWrite), record
// the operation log, or take a CrashClone mid-operation.
//
// Locks (Lock) live in a table of this MemFS, by file (so hard links share
// one), with the semantics of the OS's: exclusive between any two Lock
// calls, released by Release. A crash clone holds none: the process that
// held them died.
type MemFS struct {
	mu     sync.Mutex // guards everything below and every node
	root   *memNode
	clock  int64 // ticks on every change; the modification times
	ino    uint64
	inject func(op Op, path string) error
	open   int                   // open handles and held locks
	locks  map[*memNode]*memLock // held locks by file
}

// Op names a file-system operation for InjectError.
type Op uint8

// The operations an injector sees. OpOpen covers OpenFile (creation and
// truncation included), OpRead a file's Read and ReadAt, OpStat both
// FS.Stat and File.Stat, OpLock Lock (creating the file and writing the
// holder included; Release is not injectable, like Close).
const (
	OpOpen Op = iota + 1
	OpWrite
	OpSync
	OpTruncate
	OpLink
	OpRemove
	OpMkdir
	OpSyncDir
	OpRead
	OpStat
	OpReadDir
	OpLock
)

var opNames = [...]string{OpOpen: "open", OpWrite: "write", OpSync: "sync", OpTruncate: "truncate",
	OpLink: "link", OpRemove: "remove", OpMkdir: "mkdir", OpSyncDir: "syncdir", OpRead: "read",
	OpStat: "stat", OpReadDir: "readdir", OpLock: "lock"}

func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// ErrInjected is a ready-made error for injectors to return.
var ErrInjected = errors.New("vfs: injected error")

// ShortWrite, returned by an injector for OpWrite, makes the write store
// only its first N bytes (fewer if the write is shorter) and then fail
// with Err (ErrInjected when nil): a write interrupted part way, as a full
// disk or a crash leaves it.
type ShortWrite struct {
	N   int
	Err error
}

func (e *ShortWrite) Error() string {
	return fmt.Sprintf("vfs: short write after %d bytes: %v", e.N, e.cause())
}

func (e *ShortWrite) Unwrap() error { return e.cause() }

func (e *ShortWrite) cause() error {
	if e.Err == nil {
		return ErrInjected
	}
	return e.Err
}

// memNode is a file (an inode: links share it) or a directory.
type memNode struct {
	isDir   bool
	perm    fs.FileMode
	modTime int64
	ino     uint64
	// Files.
	data   []byte
	synced []byte
	// Directories.
	entries map[string]*memNode // current
	durable map[string]*memNode // as of the last SyncDir
}

// NewMem returns an empty MemFS holding only its root directory, which
// always exists (a crash cannot lose it).
func NewMem() *MemFS {
	m := &MemFS{}
	m.root = m.newDir(0o755)
	return m
}

func (m *MemFS) newDir(perm fs.FileMode) *memNode {
	m.ino++
	return &memNode{isDir: true, perm: perm.Perm(), modTime: m.tick(), ino: m.ino, entries: map[string]*memNode{}}
}

// tick advances the clock; mu must be held.
func (m *MemFS) tick() int64 {
	m.clock++
	return m.clock
}

// InjectError installs fn, called before every operation with the
// operation and its path (for Link, the new name). A non-nil result fails
// the operation without effect, except a *ShortWrite for OpWrite (see
// there). fn runs without MemFS's lock held, so it may call CrashClone or
// InjectError. nil removes the hook.
func (m *MemFS) InjectError(fn func(op Op, path string) error) {
	m.mu.Lock()
	m.inject = fn
	m.mu.Unlock()
}

// before consults the injector.
func (m *MemFS) before(op Op, name string) error {
	m.mu.Lock()
	fn := m.inject
	m.mu.Unlock()
	if fn == nil {
		return nil
	}
	return fn(op, name)
}

// OpenFiles returns the number of handles opened and not yet closed, and
// of locks taken and not yet released (an OS lock holds a descriptor).
func (m *MemFS) OpenFiles() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.open
}

// CrashClone returns a new MemFS holding only what was durable in m: the
// directories and files reachable from the root through durable entries,
// each file with its synced bytes. Hard links stay shared. In the clone
// everything is durable. The clone has no injector and holds no locks.
func (m *MemFS) CrashClone() *MemFS { return m.CrashCloneWith(nil) }

// CrashCloneWith is CrashClone with a say in what each surviving file
// holds: keep gets the file's synced and current bytes and returns the
// bytes the clone's file starts with (durable in the clone). A nil keep is
// CrashClone. It models a file system that wrote back some unsynced data
// before the crash: returning a prefix of current that extends synced
// produces the torn tail a real crash can leave in the middle of an
// append. keep must not modify or retain its arguments.
func (m *MemFS) CrashCloneWith(keep func(synced, current []byte) []byte) *MemFS {
	return m.crashClone(keep, false)
}

// CrashCloneEntries is CrashCloneWith on a file system that wrote back
// every directory change before the crash (a journaling file system
// commits a create with any later fsync, of any file): the tree is the
// current one, each file holding what keep returns (its synced bytes if
// keep is nil). It shows what a store leaves when a name outlives the
// data it was created for: a file created and written but not synced
// survives empty, or holding what keep chose.
func (m *MemFS) CrashCloneEntries(keep func(synced, current []byte) []byte) *MemFS {
	return m.crashClone(keep, true)
}

// crashClone is CrashCloneWith, with the current entries of every
// directory instead of its durable ones if entries is set.
func (m *MemFS) crashClone(keep func(synced, current []byte) []byte, entries bool) *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := &MemFS{clock: m.clock, ino: m.ino}
	seen := map[*memNode]*memNode{}
	var clone func(n *memNode) *memNode
	clone = func(n *memNode) *memNode {
		if cn, ok := seen[n]; ok {
			return cn
		}
		cn := &memNode{isDir: n.isDir, perm: n.perm, modTime: n.modTime, ino: n.ino}
		seen[n] = cn
		if n.isDir {
			from := n.durable
			if entries {
				from = n.entries
			}
			cn.entries = make(map[string]*memNode, len(from))
			for name, child := range from {
				cn.entries[name] = clone(child)
			}
			cn.durable = maps.Clone(cn.entries)
		} else {
			data := n.synced
			if keep != nil {
				data = keep(n.synced, n.data)
			}
			cn.data = slices.Clone(data)
			cn.synced = slices.Clone(data)
		}
		return cn
	}
	c.root = clone(m.root)
	if c.root.entries == nil {
		c.root.entries = map[string]*memNode{}
	}
	return c
}

// DropUnsynced returns a keep function for CrashCloneWith that models a
// crash (or a power loss) under the usual contract of fsync: each file
// keeps its synced bytes and the first keep(n) of the n bytes written
// since its last sync, and loses the rest. So any suffix of the unsynced
// bytes may be dropped, never bytes before a sync; keep chooses which
// suffix, file by file (it is called once per file with unsynced bytes;
// its result is clamped to 0..n). A file whose current bytes do not
// extend its synced ones (truncated since its last sync) keeps its synced
// bytes: an unsynced truncation may be lost as a whole.
func DropUnsynced(keep func(unsynced int) int) func(synced, current []byte) []byte {
	return func(synced, current []byte) []byte {
		n := len(current) - len(synced)
		if n <= 0 || !bytes.HasPrefix(current, synced) {
			return synced
		}
		k := min(max(keep(n), 0), n)
		return current[:len(synced)+k]
	}
}

// split turns a path into its components from the root. Relative paths are
// taken from the root too, and ".." stops at the root (path.Clean of a
// rooted path), as it does on the OS.
func split(name string) ([]string, error) {
	p := path.Clean("/" + filepath.ToSlash(name))
	if p == "/" {
		return nil, nil
	}
	return strings.Split(p[1:], "/"), nil
}

// lookup returns the node at name; mu must be held.
func (m *MemFS) lookup(name string) (*memNode, error) {
	parts, err := split(name)
	if err != nil {
		return nil, err
	}
	n := m.root
	for _, p := range parts {
		if !n.isDir {
			return nil, errNotDir
		}
		c, ok := n.entries[p]
		if !ok {
			return nil, fs.ErrNotExist
		}
		n = c
	}
	return n, nil
}

// parent returns the directory holding name and name's base; mu must be
// held.
func (m *MemFS) parent(name string) (*memNode, string, error) {
	parts, err := split(name)
	if err != nil {
		return nil, "", err
	}
	if len(parts) == 0 {
		return nil, "", errors.New("the root has no parent")
	}
	dir, err := m.lookup(strings.Join(parts[:len(parts)-1], "/"))
	if err != nil {
		return nil, "", err
	}
	if !dir.isDir {
		return nil, "", errNotDir
	}
	return dir, parts[len(parts)-1], nil
}

var (
	errNotDir   = errors.New("not a directory")
	errIsDir    = errors.New("is a directory")
	errNotEmpty = errors.New("directory not empty")
	errBadFD    = errors.New("bad file descriptor (not open for this access)")
)

func pathErr(op, name string, err error) error { return &fs.PathError{Op: op, Path: name, Err: err} }

// OpenFile opens a file like os.OpenFile: O_RDONLY, O_WRONLY, O_RDWR,
// O_APPEND, O_CREATE, O_EXCL and O_TRUNC are honoured. A created file gets
// the permission bits of perm (no umask). Directories cannot be opened.
func (m *MemFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	if err := m.before(OpOpen, name); err != nil {
		return nil, pathErr("open", name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.parent(name)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	n, ok := dir.entries[base]
	switch {
	case !ok && flag&os.O_CREATE == 0:
		return nil, pathErr("open", name, fs.ErrNotExist)
	case !ok:
		m.ino++
		n = &memNode{perm: perm.Perm(), modTime: m.tick(), ino: m.ino}
		dir.entries[base] = n
		dir.modTime = m.tick()
	case flag&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL:
		return nil, pathErr("open", name, fs.ErrExist)
	case n.isDir:
		return nil, pathErr("open", name, errIsDir)
	}
	access := flag & (os.O_RDONLY | os.O_WRONLY | os.O_RDWR)
	f := &memFile{fs: m, node: n, name: name,
		read:   access == os.O_RDONLY || access == os.O_RDWR,
		write:  access == os.O_WRONLY || access == os.O_RDWR,
		append: flag&os.O_APPEND != 0}
	if flag&os.O_TRUNC != 0 && f.write {
		n.data = nil
		n.modTime = m.tick()
	}
	m.open++
	return f, nil
}

// MkdirAll creates path and its missing parents with perm, like
// os.MkdirAll. A new directory is a new entry of its parent: it survives a
// crash once the parent is synced.
func (m *MemFS) MkdirAll(name string, perm fs.FileMode) error {
	if err := m.before(OpMkdir, name); err != nil {
		return pathErr("mkdir", name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	parts, err := split(name)
	if err != nil {
		return pathErr("mkdir", name, err)
	}
	n := m.root
	for _, p := range parts {
		c, ok := n.entries[p]
		if !ok {
			c = m.newDir(perm)
			n.entries[p] = c
			n.modTime = m.tick()
		} else if !c.isDir {
			return pathErr("mkdir", name, errNotDir)
		}
		n = c
	}
	return nil
}

// Link makes newname another name of oldname's file; it fails with an
// error matching fs.ErrExist if newname exists. The injector sees newname.
func (m *MemFS) Link(oldname, newname string) error {
	if err := m.before(OpLink, newname); err != nil {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: err}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup(oldname)
	if err == nil && n.isDir {
		err = errIsDir
	}
	if err != nil {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: err}
	}
	dir, base, err := m.parent(newname)
	if err != nil {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: err}
	}
	if _, ok := dir.entries[base]; ok {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: fs.ErrExist}
	}
	dir.entries[base] = n
	dir.modTime = m.tick()
	return nil
}

// Remove removes a name, or an empty directory.
func (m *MemFS) Remove(name string) error {
	if err := m.before(OpRemove, name); err != nil {
		return pathErr("remove", name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.parent(name)
	if err != nil {
		return pathErr("remove", name, err)
	}
	n, ok := dir.entries[base]
	switch {
	case !ok:
		return pathErr("remove", name, fs.ErrNotExist)
	case n.isDir && len(n.entries) > 0:
		return pathErr("remove", name, errNotEmpty)
	}
	delete(dir.entries, base)
	dir.modTime = m.tick()
	return nil
}

// Stat describes a file or directory. ModTime changes on every write,
// truncation or change of a directory's entries.
func (m *MemFS) Stat(name string) (fs.FileInfo, error) {
	if err := m.before(OpStat, name); err != nil {
		return nil, pathErr("stat", name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup(name)
	if err != nil {
		return nil, pathErr("stat", name, err)
	}
	return n.info(path.Base("/" + filepath.ToSlash(name))), nil
}

// ReadDir lists a directory sorted by name.
func (m *MemFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if err := m.before(OpReadDir, name); err != nil {
		return nil, pathErr("readdir", name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup(name)
	if err == nil && !n.isDir {
		err = errNotDir
	}
	if err != nil {
		return nil, pathErr("readdir", name, err)
	}
	names := slices.Sorted(maps.Keys(n.entries))
	out := make([]fs.DirEntry, len(names))
	for i, nm := range names {
		out[i] = fs.FileInfoToDirEntry(n.entries[nm].info(nm))
	}
	return out, nil
}

// SyncDir makes the directory's current entries durable.
func (m *MemFS) SyncDir(name string) error {
	if err := m.before(OpSyncDir, name); err != nil {
		return pathErr("syncdir", name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup(name)
	if err == nil && !n.isDir {
		err = errNotDir
	}
	if err != nil {
		return pathErr("syncdir", name, err)
	}
	n.durable = maps.Clone(n.entries)
	return nil
}

// info snapshots the node; mu must be held.
func (n *memNode) info(name string) fs.FileInfo {
	fi := memInfo{name: name, size: int64(len(n.data)), mode: n.perm, modTime: n.modTime}
	if n.isDir {
		fi.mode |= fs.ModeDir
		fi.size = 0
	}
	return fi
}

type memInfo struct {
	name    string
	size    int64
	mode    fs.FileMode
	modTime int64
}

func (fi memInfo) Name() string       { return fi.name }
func (fi memInfo) Size() int64        { return fi.size }
func (fi memInfo) Mode() fs.FileMode  { return fi.mode }
func (fi memInfo) ModTime() time.Time { return time.Unix(0, fi.modTime) }
func (fi memInfo) IsDir() bool        { return fi.mode.IsDir() }
func (fi memInfo) Sys() any           { return nil }

// memFile is an open handle. Like a POSIX descriptor it keeps its inode:
// writes through it reach the file even after its names are removed.
type memFile struct {
	fs     *MemFS
	node   *memNode
	name   string
	read   bool
	write  bool
	append bool
	off    int64 // guarded by fs.mu
	closed bool  // guarded by fs.mu
}

// access is what an operation needs of a handle.
type access uint8

const (
	needOpen access = iota
	needRead
	needWrite
)

// check validates the handle for an access; fs.mu must be held.
func (f *memFile) check(op string, need access) error {
	switch {
	case f.closed:
		return pathErr(op, f.name, fs.ErrClosed)
	case need == needWrite && !f.write, need == needRead && !f.read:
		return pathErr(op, f.name, errBadFD)
	}
	return nil
}

func (f *memFile) Read(p []byte) (int, error) {
	if err := f.fs.before(OpRead, f.name); err != nil {
		return 0, pathErr("read", f.name, err)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("read", needRead); err != nil {
		return 0, err
	}
	if f.off >= int64(len(f.node.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.node.data[f.off:])
	f.off += int64(n)
	return n, nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.before(OpRead, f.name); err != nil {
		return 0, pathErr("read", f.name, err)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("read", needRead); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("read", f.name, errors.New("negative offset"))
	}
	if off >= int64(len(f.node.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.node.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) Write(p []byte) (int, error) {
	keep := len(p)
	injected := f.fs.before(OpWrite, f.name)
	if injected != nil {
		var sw *ShortWrite
		if !errors.As(injected, &sw) {
			return 0, pathErr("write", f.name, injected)
		}
		keep = min(max(sw.N, 0), len(p))
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("write", needWrite); err != nil {
		return 0, err
	}
	n := f.node
	if f.append {
		f.off = int64(len(n.data))
	}
	end := f.off + int64(keep)
	if end > int64(len(n.data)) {
		n.data = append(n.data, make([]byte, end-int64(len(n.data)))...)
	}
	copy(n.data[f.off:end], p[:keep])
	f.off = end
	n.modTime = f.fs.tick()
	if injected != nil {
		return keep, pathErr("write", f.name, injected)
	}
	return keep, nil
}

func (f *memFile) Sync() error {
	if err := f.fs.before(OpSync, f.name); err != nil {
		return pathErr("sync", f.name, err)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("sync", needOpen); err != nil {
		return err
	}
	f.node.synced = slices.Clone(f.node.data)
	return nil
}

func (f *memFile) Truncate(size int64) error {
	if err := f.fs.before(OpTruncate, f.name); err != nil {
		return pathErr("truncate", f.name, err)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("truncate", needWrite); err != nil {
		return err
	}
	if size < 0 {
		return pathErr("truncate", f.name, errors.New("negative size"))
	}
	n := f.node
	if size <= int64(len(n.data)) {
		n.data = slices.Clip(n.data[:size])
	} else {
		n.data = append(n.data, make([]byte, size-int64(len(n.data)))...)
	}
	n.modTime = f.fs.tick()
	return nil
}

func (f *memFile) Stat() (fs.FileInfo, error) {
	if err := f.fs.before(OpStat, f.name); err != nil {
		return nil, pathErr("stat", f.name, err)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("stat", needOpen); err != nil {
		return nil, err
	}
	return f.node.info(path.Base("/" + filepath.ToSlash(f.name))), nil
}

// Close releases the handle. It is not an injectable operation.
func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return pathErr("close", f.name, fs.ErrClosed)
	}
	f.closed = true
	f.fs.open--
	return nil
}

// Lock takes the lock of the file name (see FS.Lock), creating it with
// mode 0600 if missing. The holder text replaces the file's contents
// without being synced, so a crash clone keeps the lock file (once its
// directory is synced) but not the text.
func (m *MemFS) Lock(name string, holder []byte) (Lock, error) {
	if err := m.before(OpLock, name); err != nil {
		return nil, pathErr("lock", name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.parent(name)
	if err != nil {
		return nil, pathErr("lock", name, err)
	}
	n, ok := dir.entries[base]
	switch {
	case !ok:
		m.ino++
		n = &memNode{perm: 0o600, modTime: m.tick(), ino: m.ino}
		dir.entries[base] = n
		dir.modTime = m.tick()
	case n.isDir:
		return nil, pathErr("lock", name, errIsDir)
	}
	if m.locks[n] != nil {
		return nil, &lockedError{path: name, holder: strings.TrimSpace(string(n.data))}
	}
	if m.locks == nil {
		m.locks = map[*memNode]*memLock{}
	}
	l := &memLock{fs: m, node: n}
	m.locks[n] = l
	n.data = slices.Clone(holder)
	n.modTime = m.tick()
	m.open++
	return l, nil
}

// memLock is a lock held in a MemFS's table.
type memLock struct {
	fs       *MemFS
	node     *memNode
	released bool // guarded by fs.mu
}

// Release gives the lock up. Idempotent; not an injectable operation.
func (l *memLock) Release() error {
	l.fs.mu.Lock()
	defer l.fs.mu.Unlock()
	if l.released {
		return nil
	}
	l.released = true
	delete(l.fs.locks, l.node)
	l.node.data = nil // as the OS implementation: the text names the current holder only
	l.fs.open--
	return nil
}
