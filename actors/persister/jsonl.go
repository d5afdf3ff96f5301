package persister

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/vfs"
)

// This file is the JSONL store (spec §3.8): one log file per session, in
// the harness's interop format, written append-only through a vfs.FS. The
// format, the write path and the recovery rules are documented in doc.go.

// DefaultMaxOpenFiles is JSONLConfig.MaxOpenFiles's default.
const DefaultMaxOpenFiles = 256

// JSONLConfig configures a JSONLStore. Every field but Root may be left
// zero.
type JSONLConfig struct {
	// Root is the directory holding the sessions. Required. It is created
	// (mode 0700) on the first write if missing.
	Root string
	// FS is the file system written through. Default vfs.OS().
	FS vfs.FS
	// Plain writes plain session.jsonl files. Default false: the harness's
	// default session.jsonl.zstd, one checksummed zstd frame for the header
	// line and one per durable batch. A root holds one encoding only.
	Plain bool
	// NoPack writes every chunk event on its own line. Default false: runs
	// of three or more chunk deltas within a batch are packed into one row
	// (spec §2.13), as the harness's packChunks=true does. Reading accepts
	// both either way.
	NoPack bool
	// MaxOpenFiles bounds the append handles kept open between appends,
	// least recently used closed first. Default DefaultMaxOpenFiles. An
	// operation in progress holds its own handle on top of the bound, and
	// reads open and close theirs. A held writer lock (Lock) keeps one
	// more descriptor per session, outside the bound: closing it would
	// give the lock up.
	MaxOpenFiles int
	// Lock makes the store take each session's writer lock, the file
	// session.lock beside the log, before its first write of any kind (the
	// first Append, the one that publishes the file included, and Load,
	// which may repair), and hold it until Release or Close. A session
	// whose lock another writer holds fails those with a *LockedError.
	// Default false: the store assumes it is the only writer of its root
	// (one process), and only the seq check fences another.
	Lock bool
	// Holder is the text the store writes into the lock files it holds,
	// naming it to a writer the lock refuses. Default "pid <pid> on
	// <hostname>". Used only with Lock.
	Holder string
	// MaxRecordBytes bounds one line of a log read (the header or one
	// record): a longer line makes the log corrupt (a
	// *session.RecordTooLargeError inside a *session.CorruptError), so a
	// hostile file cannot make a load hold more than this of one line.
	// Default 0: session.DefaultMaxRecordBytes (16 MiB), far above the
	// largest real record.
	MaxRecordBytes int
}

// Validate checks the configuration.
func (c JSONLConfig) Validate() error {
	switch {
	case c.Root == "":
		return errors.New("persister: jsonl config: Root is required")
	case c.MaxOpenFiles < 0:
		return fmt.Errorf("persister: jsonl config: MaxOpenFiles %d is negative", c.MaxOpenFiles)
	case c.MaxRecordBytes < 0:
		return fmt.Errorf("persister: jsonl config: MaxRecordBytes %d is negative", c.MaxRecordBytes)
	}
	return nil
}

// JSONLStore is the Store of JSONL files. It is safe for concurrent use:
// operations on one id are serialised by a per-id mutex (the store is a
// library under the persister actor, not an actor itself), operations on
// different ids run in parallel. It assumes it is the only writer of its
// root's sessions in the process (spec §3.8 "one live writer per session
// per process"); a change made behind its back is noticed (the file's size
// differs from what the store last wrote) and the file is read again
// before an append is fenced. With JSONLConfig.Lock it also excludes
// writers in other processes (doc.go, "Writer fencing").
type JSONLStore struct {
	fs       vfs.FS
	root     string
	artifact string // file name of the encoding written
	other    string // file name of the other encoding, refused
	zstd     bool
	pack     bool
	locking  bool   // JSONLConfig.Lock
	holder   []byte // JSONLConfig.Holder, as written to lock files
	reading  session.ReadOptions

	// Lock order: jsonlSession.mu before mu, never the reverse. mu is held
	// only for map and list updates, never across I/O.
	mu       sync.Mutex
	closed   bool                                // guarded by mu
	sessions map[session.SessionID]*jsonlSession // guarded by mu
	handles  handleCache                         // guarded by mu
	synced   map[string]bool                     // dirs whose entry in their parent was synced; guarded by mu
	made     map[string]bool                     // dirs above the root this store may have created, entry not synced yet; guarded by mu
	orphans  map[string]bool                     // every jsonlSession.orphan; guarded by mu
	dirSyncs map[string]*dirSyncs                // shared directory fsyncs by directory; guarded by mu
}

// jsonlSession is what the store knows about one id. mu serialises every
// operation on the id and guards every other field.
type jsonlSession struct {
	mu   sync.Mutex
	id   session.SessionID
	refs int // operations holding or waiting for mu; guarded by the store's mu

	header     session.Header // from Create, or from the file once read
	registered bool           // created, and nothing stored yet
	path       string         // the artifact, once found on disk or published

	// known says next and size describe the file: the stored next seq and
	// the byte size, with no torn tail. Otherwise the file must be read.
	known bool
	next  int64
	size  int64
	// syncedNext and syncedSize (valid when known) are the next seq and
	// the byte size as of the last fsync: bytes past syncedSize were
	// written by appends without durable, and a crash may drop them. A
	// failed append cuts the file back to syncedSize.
	syncedNext int64
	syncedSize int64
	// dirty says the file may hold bytes past size that nobody
	// acknowledged (a failed append left them, and truncating back failed
	// or was not tried yet); they are removed before anything else is
	// done.
	dirty bool
	// orphan is an artifact published by a first append that then failed
	// (its directory sync did) and that could not be unlinked: it is
	// removed before anything else is done, and List skips it meanwhile.
	orphan string
	// unnamed says this store created the artifact (a first append
	// without durable) and has not made it durable since: neither its
	// bytes nor its name in the directory. The next barrier fsyncs the
	// file and then the directory; a failure before that removes the
	// artifact, since nothing of it was durable. Invariant: unnamed
	// implies syncedNext and syncedSize are 0.
	unnamed bool
	// held is the session's writer lock while the store holds it (only
	// with JSONLConfig.Lock). Invariant: dirty, orphan or unnamed set
	// implies held (when locking): bytes nobody acknowledged are removed,
	// or the lock is kept, so that the next writer never finds them.
	held vfs.Lock
}

// setKnown records that st's file holds next events in size bytes, read
// from it or just written and synced. A file read anew counts as synced
// up to its end, unless it is the size st knew already (then what st knew
// unsynced stays so).
func (st *jsonlSession) setKnown(next, size int64) {
	if !st.known || st.size != size || st.next != next {
		st.syncedNext, st.syncedSize = next, size
	}
	st.known, st.next, st.size = true, next, size
}

// markSynced records that everything written to st's file is durable.
func (st *jsonlSession) markSynced() {
	st.syncedNext, st.syncedSize = st.next, st.size
}

// unsynced reports whether st's file holds bytes written without an
// fsync, or a name not made durable yet.
func (st *jsonlSession) unsynced() bool {
	return st.unnamed || (st.known && st.syncedSize < st.size)
}

// NewJSONLStore opens the store at cfg.Root. It checks the root's layout
// (ErrLayout for the other encoding or the flat layout) by walking its
// project and session directories; it reads no log.
func NewJSONLStore(cfg JSONLConfig) (*JSONLStore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.FS == nil {
		cfg.FS = vfs.OS()
	}
	if cfg.MaxOpenFiles == 0 {
		cfg.MaxOpenFiles = DefaultMaxOpenFiles
	}
	if cfg.Lock && cfg.Holder == "" {
		cfg.Holder = defaultHolder()
	}
	s := &JSONLStore{
		fs:       cfg.FS,
		root:     filepath.Clean(cfg.Root),
		artifact: zstdArtifact,
		other:    plainArtifact,
		zstd:     !cfg.Plain,
		pack:     !cfg.NoPack,
		locking:  cfg.Lock,
		reading:  session.ReadOptions{MaxRecordBytes: cfg.MaxRecordBytes},
		holder:   []byte(cfg.Holder + "\n"),
		sessions: map[session.SessionID]*jsonlSession{},
		handles:  newHandleCache(cfg.MaxOpenFiles),
		synced:   map[string]bool{},
		made:     map[string]bool{},
		orphans:  map[string]bool{},
		dirSyncs: map[string]*dirSyncs{},
	}
	if cfg.Plain {
		s.artifact, s.other = plainArtifact, zstdArtifact
	}
	if err := s.walk(context.Background(), nil); err != nil {
		return nil, &openError{root: s.root, err: err}
	}
	return s, nil
}

// openError is a failure of NewJSONLStore to open the store at root. Its
// text says "persister: " once (the layout errors say it too), and names
// the root once: a file system error on the root names it already.
type openError struct {
	root string
	err  error
}

func (e *openError) Error() string {
	cause := strings.TrimPrefix(e.err.Error(), "persister: ")
	var pe *fs.PathError
	if errors.As(e.err, &pe) && filepath.Clean(pe.Path) == e.root {
		return "persister: open store: " + cause
	}
	return "persister: open " + e.root + ": " + cause
}

func (e *openError) Unwrap() error { return e.err }

// defaultHolder is JSONLConfig.Holder's default: "pid <pid> on <host>".
func defaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "an unknown host"
	}
	return fmt.Sprintf("pid %d on %s", os.Getpid(), host)
}

// Locate returns the path of the session's artifact: where it is, or will
// be once appended to. No I/O.
func (s *JSONLStore) Locate(h session.Header) string {
	return filepath.Join(sessionDir(s.root, h), s.artifact)
}

// Create registers h lazily: nothing is written until the first Append.
// ErrExists if the id is registered or stored (under any project).
func (s *JSONLStore) Create(h session.Header) error {
	if err := h.Validate(); err != nil {
		return fmt.Errorf("persister: create: %w", err)
	}
	st, err := s.lock(h.ID)
	if err != nil {
		return err
	}
	defer s.unlock(st)
	if st.registered || st.path != "" {
		return fmt.Errorf("persister: create %s: %w", h.ID, ErrExists)
	}
	found, err := s.find(context.Background(), st)
	switch {
	case err != nil:
		return fmt.Errorf("persister: create %s: %w", h.ID, err)
	case found:
		return fmt.Errorf("persister: create %s: %w", h.ID, ErrExists)
	}
	st.header, st.registered = h, true
	return nil
}

// Append appends events (see Writer). An event a JSONL log cannot hold
// (session.CheckJSONL: an ignorable event typed as a packed-row tag, which
// a SQLite store holds) refuses the batch, matching session.ErrNotJSONL.
// The first append publishes the file
// with the header, durably; later ones write one batch, and a durable one
// then fsyncs the file (fdatasync on Linux), which covers the batches
// written before it without durable, through whatever descriptor: the
// cached handle may have been evicted and closed since. A failed append
// cuts the file back to its size at the last fsync.
func (s *JSONLStore) Append(ctx context.Context, id session.SessionID, events []session.Event, durable bool) error {
	st, err := s.lock(id)
	if err != nil {
		return err
	}
	defer s.unlock(st)
	err = ctxErr(ctx)
	if err == nil {
		err = session.CheckJSONL(events)
	}
	if err == nil {
		err = s.appendLocked(ctx, st, events, durable)
	}
	if err != nil {
		if cerr := s.cutBack(st); cerr != nil {
			err = fmt.Errorf("%w; then %w", err, cerr)
		}
		return fmt.Errorf("persister: append %s: %w", id, err)
	}
	return nil
}

// cutBack truncates st's file back to its last synced size after a failed
// append (see Writer.Append): the batch and what appends without durable
// wrote since the last fsync go. If the truncation fails, st stays dirty
// and the next operation on the id removes them first. An artifact of
// which nothing is durable yet (unnamed) is removed: the session is back
// to registered, and its next append publishes it again from seq 0.
func (s *JSONLStore) cutBack(st *jsonlSession) error {
	if st.unnamed {
		return s.unpublish(st)
	}
	if st.unsynced() {
		st.size, st.next, st.dirty = st.syncedSize, st.syncedNext, true
	}
	return s.clean(st)
}

func (s *JSONLStore) appendLocked(ctx context.Context, st *jsonlSession, events []session.Event, durable bool) error {
	found, err := s.find(ctx, st)
	if err != nil {
		return err
	}
	if !found {
		if !st.registered {
			return ErrNotFound
		}
		if err := fence(st.id, events, 0); err != nil || len(events) == 0 {
			return err
		}
		published, err := s.publish(st, events, durable)
		if err != nil || published {
			return err
		}
		// Another writer published the file before this one took the
		// lock: append to it as to any stored log (fenced, most likely).
	}
	if err := s.writerLock(st, filepath.Dir(st.path)); err != nil {
		return err
	}
	f, err := s.acquire(st.path)
	if err != nil {
		return err
	}
	keep := false
	defer func() { s.release(st.path, f, keep) }()
	if err := s.settle(st, f); err != nil {
		return err
	}
	if err := fence(st.id, events, st.next); err != nil {
		keep = true
		return err
	}
	if len(events) > 0 {
		if err := s.writeBatch(st, f, events, durable); err != nil {
			return err
		}
	} else if durable && st.unsynced() {
		if err := s.sync(st, f); err != nil {
			return err
		}
	}
	keep = true
	return nil
}

// sync fsyncs st's file through f: everything written to it is durable.
// An artifact created without durable (unnamed) then has its directory
// fsynced too, which makes its name durable. On failure st is dirty back
// to its last synced size, and f, whose page cache can no longer be
// trusted, must not be reused: the caller closes it (release without
// keep) and the next operation opens the file afresh.
func (s *JSONLStore) sync(st *jsonlSession, f vfs.File) error {
	err := vfs.Datasync(f)
	if err == nil {
		err = s.syncName(st)
	}
	if err != nil {
		st.size, st.next, st.dirty = st.syncedSize, st.syncedNext, true
		return err
	}
	st.markSynced()
	return nil
}

// syncName fsyncs the directory of an unnamed artifact, once its bytes
// are synced: the first barrier after a first append without durable.
func (s *JSONLStore) syncName(st *jsonlSession) error {
	if !st.unnamed {
		return nil
	}
	if err := s.fs.SyncDir(filepath.Dir(st.path)); err != nil {
		return err
	}
	st.unnamed = false
	return nil
}

// unpublish removes an unnamed artifact after a failed append: nothing
// of it was durable, so the session is back to registered, not stored.
// If the removal fails the artifact is st's orphan, removed before
// anything else is done (and the writer lock is kept meanwhile).
func (s *JSONLStore) unpublish(st *jsonlSession) error {
	path := st.path
	s.dropHandle(path)
	st.registered, st.path, st.known, st.dirty, st.unnamed = true, "", false, false, false
	st.next, st.size, st.syncedNext, st.syncedSize = 0, 0, 0, 0
	if err := s.fs.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.setOrphan(st, path)
		return fmt.Errorf("unlink the artifact of a failed first append: %w", err)
	}
	return nil
}

// fence checks that events carry the seqs next, next+1, ... (and that
// none is the zero Event, which has no encoding).
func fence(id session.SessionID, events []session.Event, next int64) error {
	for i, e := range events {
		if e.IsZero() {
			return fmt.Errorf("event %d of the batch is zero: %w", i, session.ErrInvalid)
		}
		if want := next + int64(i); e.Seq() != want {
			return &FenceError{ID: id, Want: want, Got: e.Seq()}
		}
	}
	return nil
}

// publish makes the first write of a session: the artifact created under
// its name (O_EXCL) and written, header and batch in one write, then
// fdatasynced, then its directory fsynced. With Lock, the writer lock is
// taken once the directory exists. An artifact that exists already is
// either a torn creation (tornCreation: the file ends inside its header,
// all a crash can leave of an unacknowledged first write), which this
// writer removes and creates again, or a log another writer published
// (and gave the lock up): then nothing is written, st now names that
// file and published is false. On error nothing is published (the
// artifact is unlinked again, or recorded as the orphan the next
// operation unlinks), so a retry starts over.
func (s *JSONLStore) publish(st *jsonlSession, events []session.Event, durable bool) (published bool, err error) {
	path := s.Locate(st.header)
	dir := filepath.Dir(path)
	if _, err := s.fs.Stat(filepath.Join(dir, s.other)); err == nil {
		return false, fmt.Errorf("%w: %s holds a %s", ErrLayout, dir, s.other)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if err := s.mkdirDurable(dir); err != nil {
		return false, err
	}
	if s.locking {
		if err := s.writerLock(st, dir); err != nil {
			return false, err
		}
	}
	f, err := s.createArtifact(path)
	if errors.Is(err, fs.ErrExist) {
		st.registered, st.path, st.known = false, path, false
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, s.writeFirst(st, f, path, events, durable)
}

// createArtifact creates the artifact at path for a first write. If it
// exists and is a torn creation, it is removed and created again: the
// store holds the session's writer lock (or, without Lock, is its only
// writer), so no writer is in the middle of creating it. An error
// matching fs.ErrExist means a log is stored there.
func (s *JSONLStore) createArtifact(path string) (vfs.File, error) {
	const flags = os.O_WRONLY | os.O_APPEND | os.O_CREATE | os.O_EXCL
	f, err := s.fs.OpenFile(path, flags, 0o600)
	if !errors.Is(err, fs.ErrExist) {
		return f, err
	}
	torn, terr := s.tornCreation(path)
	switch {
	case terr != nil:
		return nil, terr
	case !torn:
		return nil, err
	}
	if err := s.fs.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove the torn creation %s: %w", path, err)
	}
	return s.fs.OpenFile(path, flags, 0o600)
}

// tornCreation reports whether the artifact at path ends inside its
// header (an empty file included): what a crash can leave of a first write
// that was never acknowledged, since the artifact is created under its
// name and then written and synced. Such a file stores nothing; List
// skips it, and reads find no session there. A file that is gone counts
// as one too.
func (s *JSONLStore) tornCreation(path string) (bool, error) {
	_, _, err := s.readHeader(path)
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, session.ErrNoHeader):
		return true, nil
	case errors.As(err, &pe):
		// An I/O error: whether the file stores a log is unknown.
		return false, err
	}
	// A header, or a damaged one: a log is stored there (a damaged one
	// is corruption, which the reads report).
	return false, nil
}

// writeFirst is publish's write through f, the artifact just created: the
// header and the batch in one write; if durable, then fdatasync and the
// directory's fsync, which makes the artifact's name durable. Without
// durable the artifact is unnamed: written like any batch behind, and
// made durable, name and all, by the session's next barrier. f becomes
// the cached append handle.
func (s *JSONLStore) writeFirst(st *jsonlSession, f vfs.File, path string, events []session.Event, durable bool) error {
	data := s.encodeBatch(s.encodeHeader(nil, st.header), events)
	_, err := f.Write(data)
	if err == nil && durable {
		err = vfs.Datasync(f)
	}
	if err == nil && durable {
		err = s.fs.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		_ = f.Close()
		// The batch must not count as stored after an error, or a retry
		// would be fenced. Unlink it; if even that fails, the next
		// operation on the id does before anything else.
		if rerr := s.fs.Remove(path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			s.setOrphan(st, path)
		}
		return err
	}
	st.registered, st.path = false, path
	st.known = false
	st.setKnown(int64(len(events)), int64(len(data)))
	if !durable {
		// Nothing is durable, not even the header: a failed append
		// removes the artifact (cutBack), and the caller, which holds
		// these events as not yet durable, appends them again from seq 0
		// (Writer.Append).
		st.syncedNext, st.syncedSize, st.unnamed = 0, 0, true
	}
	s.release(path, f, true)
	return nil
}

// mkdirDurable creates dir (and its parents, mode 0700) and makes every
// directory from the root down to dir durable in its parent, syncing each
// parent at most once per store lifetime. A directory under the root that
// merely exists is not trusted to be durable: it may be the leftover of a
// write whose directory sync failed, or of a process that crashed before
// syncing. Above the root, only the directories this call creates are
// made durable: what existed before is the operator's.
func (s *JSONLStore) mkdirDurable(dir string) error {
	var chain []string // dir, its parent, ..., the root, then missing dirs above it
	for d := dir; ; d = filepath.Dir(d) {
		chain = append(chain, d)
		if d == s.root || filepath.Dir(d) == d {
			break
		}
	}
	if !s.isSynced(s.root) {
		for d := filepath.Dir(s.root); filepath.Dir(d) != d; d = filepath.Dir(d) {
			if s.isMade(d) {
				// Created by an earlier call whose sync failed: it exists
				// now, but its entry may not be durable.
				chain = append(chain, d)
				continue
			}
			if _, err := s.fs.Stat(d); err == nil {
				break
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			chain = append(chain, d)
			s.markMade(d)
		}
	}
	if err := s.fs.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, d := range slices.Backward(chain) {
		parent := filepath.Dir(d)
		if parent == d || s.isSynced(d) {
			continue
		}
		if err := s.syncDirShared(parent); err != nil {
			return err
		}
		s.markSynced(d)
	}
	return nil
}

// dirSyncs is the state of the shared fsyncs of one directory
// (syncDirShared). Rounds run one at a time; started and finished count
// them.
type dirSyncs struct {
	started, finished uint64
	running           bool
	done              chan struct{} // closed when the running round ends
	err               error         // the outcome of the last finished round
}

// syncDirShared fsyncs dir, sharing the fsync with concurrent callers: it
// returns the outcome of a fsync of dir that started after it was called,
// which makes every entry made in dir before the call durable. So the
// first writes of many new sessions in one project directory, which each
// need their session directory's entry durable, share a fsync of the
// project directory instead of each paying one. A caller waits for at
// most the round running when it came and the one after, which it may run
// itself.
func (s *JSONLStore) syncDirShared(dir string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dirSyncs[dir]
	if d == nil {
		d = &dirSyncs{}
		s.dirSyncs[dir] = d
	}
	need := d.started + 1
	for d.finished < need {
		if d.running {
			done := d.done
			s.mu.Unlock()
			<-done
			s.mu.Lock()
			continue
		}
		d.running, d.done = true, make(chan struct{})
		d.started++
		round, done := d.started, d.done
		s.mu.Unlock()
		err := s.fs.SyncDir(dir)
		s.mu.Lock()
		d.running, d.finished, d.err = false, round, err
		close(done)
	}
	return d.err
}

// writerLock takes st's writer lock, the file lockName in the session
// directory dir (which must exist), unless the store does not lock or
// holds it already. A lock held elsewhere is a *LockedError. Taking the
// lock anew drops what the store knew about the file: the previous holder
// may have written since, so the next write reads the file again, through
// a new descriptor (on NFS, close-to-open consistency then guarantees it
// sees everything the previous holder wrote and closed).
func (s *JSONLStore) writerLock(st *jsonlSession, dir string) error {
	if !s.locking || st.held != nil {
		return nil
	}
	if s.isClosed() {
		// Close releases the locks it finds; one taken after it would
		// never be released.
		return ErrClosed
	}
	path := filepath.Join(dir, lockName)
	l, err := s.fs.Lock(path, s.holder)
	var le *vfs.LockedError
	if errors.As(err, &le) {
		return &LockedError{ID: st.id, Path: path, Holder: le.Holder}
	}
	if err != nil {
		return fmt.Errorf("take the writer lock: %w", err)
	}
	st.held = l
	st.known = false
	if st.path != "" {
		s.dropHandle(st.path)
	}
	return nil
}

// Release ends the store's hold on id (see Writer): it removes what a
// failed append left (keeping the lock if that fails), syncs what appends
// without durable wrote (cutting it back and keeping the lock if that
// fails), releases the writer lock, and drops the cached handle and
// everything it knew of the session (see forget).
func (s *JSONLStore) Release(id session.SessionID) error {
	st, err := s.lock(id)
	if err != nil {
		return err
	}
	defer s.unlock(st)
	if err := s.removeOrphan(st); err != nil {
		return fmt.Errorf("persister: release %s: %w", id, err)
	}
	if err := s.clean(st); err != nil {
		return fmt.Errorf("persister: release %s: %w", id, err)
	}
	if err := s.syncUnsynced(st); err != nil {
		return fmt.Errorf("persister: release %s: %w", id, err)
	}
	st.known = false
	if st.path != "" {
		s.dropHandle(st.path)
	}
	if st.held == nil {
		s.forget(st)
		return nil
	}
	// The descriptor is closed, and the lock with it, even when Close
	// reports an error.
	err = st.held.Release()
	st.held = nil
	s.forget(st)
	if err != nil {
		return fmt.Errorf("persister: release %s: %w", id, err)
	}
	return nil
}

// forget drops what the store knows of a released session that holds
// nothing (no lock, nothing to remove, no artifact whose name is not yet
// durable), so that unlock deletes its entry:
// a host that passivates sessions one after another keeps none of them
// here. Its path (found again on the next operation, as for an id never
// seen) and the mark that its directory's entry was synced go too: that
// mark serves only the session's first write, which is behind it.
func (s *JSONLStore) forget(st *jsonlSession) {
	if st.registered || st.path == "" || st.held != nil || st.dirty || st.unnamed || st.orphan != "" {
		return
	}
	s.mu.Lock()
	delete(s.synced, filepath.Dir(st.path))
	s.mu.Unlock()
	st.path = ""
}

// syncUnsynced is the barrier of Release: it syncs st's file if appends
// without durable wrote to it since the last fsync. On failure the file is
// cut back to its last synced size (see Writer.Append), or marked dirty
// for the next operation to cut back.
func (s *JSONLStore) syncUnsynced(st *jsonlSession) error {
	if !st.unsynced() {
		return nil
	}
	f, err := s.acquire(st.path)
	if err == nil {
		err = s.sync(st, f)
		s.release(st.path, f, err == nil)
	}
	if err != nil {
		if cerr := s.cutBack(st); cerr != nil {
			return fmt.Errorf("%w; then %w", err, cerr)
		}
	}
	return err
}

// setOrphan records (path) or clears ("") st's orphan.
func (s *JSONLStore) setOrphan(st *jsonlSession, path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.orphans, st.orphan)
	if path != "" {
		s.orphans[path] = true
	}
	st.orphan = path
}

func (s *JSONLStore) isOrphan(path string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.orphans[path]
}

func (s *JSONLStore) isSynced(dir string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced[dir]
}

func (s *JSONLStore) markSynced(dir string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.synced[dir] = true
	delete(s.made, dir)
}

func (s *JSONLStore) isMade(dir string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.made[dir]
}

func (s *JSONLStore) markMade(dir string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.made[dir] = true
}

// settle brings st in line with the file before an append or a repair:
// it removes what a failed append left (dirty), notices a change made
// behind the store's back (size differs), reads the file when st is not
// known, and truncates a torn tail found there (re-appending the records
// recovered from a torn zstd frame, but no closers: an append continues
// the log as it is).
func (s *JSONLStore) settle(st *jsonlSession, f vfs.File) error {
	if st.dirty {
		if err := truncateBack(f, st.size); err != nil {
			return err
		}
		st.dirty = false
	}
	if st.known {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if fi.Size() == st.size {
			return nil
		}
		st.known = false
	}
	file, _, size, err := s.read(st)
	if err != nil {
		return err
	}
	st.setKnown(int64(len(file.Events)), size)
	st.known = file.Torn == nil
	if file.Torn != nil {
		return s.repair(st, f, file.Torn, nil)
	}
	return nil
}

// repair truncates the torn tail (if any) and appends, as one batch, the
// events recovered from it followed by extra. st.size must be the file's
// size.
func (s *JSONLStore) repair(st *jsonlSession, f vfs.File, torn *session.TornTail, extra []session.Event) error {
	batch := extra
	if torn != nil {
		st.known = false
		if err := f.Truncate(torn.Offset); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		st.known = false
		st.setKnown(torn.NextSeq-int64(len(torn.Recovered)), torn.Offset)
		batch = append(slices.Clip(torn.Recovered), extra...)
	}
	if len(batch) == 0 {
		return nil
	}
	return s.writeBatch(st, f, batch, true)
}

// writeBatch appends one encoded batch, and fsyncs if durable. On failure
// st is dirty back to its last synced size (the caller must not reuse f,
// and cuts the file back: see cutBack), so that nothing of the batch, nor
// anything written since the last fsync, counts as stored.
func (s *JSONLStore) writeBatch(st *jsonlSession, f vfs.File, events []session.Event, durable bool) error {
	bp := getScratch()
	defer putScratch(bp)
	buf := s.encodeBatch((*bp)[:0], events)
	*bp = buf
	if _, err := f.Write(buf); err != nil {
		st.size, st.next, st.dirty = st.syncedSize, st.syncedNext, true
		return err
	}
	st.size += int64(len(buf))
	st.next += int64(len(events))
	if durable {
		return s.sync(st, f)
	}
	return nil
}

// truncateBack cuts f to size and makes that durable.
func truncateBack(f vfs.File, size int64) error {
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("truncate back to %d: %w", size, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("truncate back to %d: %w", size, err)
	}
	return nil
}

// encodeHeader appends the header in the store's encoding to dst: the
// line, or a frame holding exactly the line.
func (s *JSONLStore) encodeHeader(dst []byte, h session.Header) []byte {
	line := append([]byte(h.JSON().String()), '\n')
	if !s.zstd {
		return append(dst, line...)
	}
	return session.AppendZstdFrame(dst, line)
}

// encodeBatch appends one batch in the store's encoding to dst: its lines
// (chunk runs packed unless NoPack), or one frame holding them.
func (s *JSONLStore) encodeBatch(dst []byte, events []session.Event) []byte {
	return encodeBatch(dst, events, s.zstd, s.pack)
}

// encodeBatch appends one batch to dst: its lines, or one zstd frame
// holding them.
func encodeBatch(dst []byte, events []session.Event, zstd, pack bool) []byte {
	if !zstd {
		return session.AppendRecords(dst, events, pack)
	}
	bp := getScratch()
	defer putScratch(bp)
	*bp = session.AppendRecords((*bp)[:0], events, pack)
	return session.AppendZstdFrame(dst, *bp)
}

// scratch holds encoding buffers, so that a steady stream of appends does
// not allocate a batch-sized buffer or two per append. A buffer grown past
// maxScratch by an outsized batch is dropped rather than kept.
var scratch = sync.Pool{New: func() any { return new([]byte) }}

const maxScratch = 1 << 20

func getScratch() *[]byte { return scratch.Get().(*[]byte) }

func putScratch(bp *[]byte) {
	if cap(*bp) <= maxScratch {
		scratch.Put(bp)
	}
}

// repairMode says whether a load commits its repair.
type repairMode uint8

const (
	commitRepair repairMode = iota // Load
	memoryRepair                   // Inspect
)

// Load returns the log balanced and commits crash repair (see Reader).
func (s *JSONLStore) Load(ctx context.Context, id session.SessionID) (Stored, error) {
	return s.load(ctx, id, commitRepair)
}

// Inspect is Load with the repair in memory only: the file is not
// touched and the revision is the one read.
func (s *JSONLStore) Inspect(ctx context.Context, id session.SessionID) (Stored, error) {
	return s.load(ctx, id, memoryRepair)
}

func (s *JSONLStore) load(ctx context.Context, id session.SessionID, mode repairMode) (Stored, error) {
	st, err := s.lock(id)
	if err != nil {
		return Stored{}, err
	}
	defer s.unlock(st)
	if err := ctxErr(ctx); err != nil {
		return Stored{}, fmt.Errorf("persister: load %s: %w", id, err)
	}
	out, err := s.loadLocked(ctx, st, mode)
	if err != nil {
		return Stored{}, fmt.Errorf("persister: load %s: %w", id, err)
	}
	return out, nil
}

func (s *JSONLStore) loadLocked(ctx context.Context, st *jsonlSession, mode repairMode) (Stored, error) {
	// Load takes the writer lock whether or not there turns out to be
	// something to repair: the repair must be computed from what the file
	// holds under the lock, and a Load is how a writer resumes a session,
	// so a second writer is refused before it starts rather than at its
	// first append.
	if err := s.readable(ctx, st, mode == commitRepair); err != nil {
		return Stored{}, err
	}
	file, fi, size, err := s.read(st)
	if err != nil {
		return Stored{}, err
	}
	if err := session.Validate(file.Header, file.Events); err != nil {
		return Stored{}, invalidLog(file.Path, err)
	}
	closers := session.InterruptedTurnClosers(file.Events)
	n := int64(len(file.Events))
	out := Stored{
		Header:   file.Header,
		Events:   append(slices.Clip(file.Events), closers...),
		Closers:  closers,
		Torn:     file.Torn,
		Revision: fileRevision(fi),
	}
	if file.Torn == nil {
		st.setKnown(n, size)
	}
	if mode == memoryRepair || (file.Torn == nil && len(closers) == 0) {
		return out, nil
	}
	f, err := s.acquire(st.path)
	if err != nil {
		return Stored{}, err
	}
	err = s.repair(st, f, file.Torn, closers)
	s.release(st.path, f, err == nil)
	if err != nil {
		return Stored{}, fmt.Errorf("commit repair: %w", err)
	}
	if fi, err = s.fs.Stat(st.path); err != nil {
		return Stored{}, err
	}
	out.Revision = fileRevision(fi)
	return out, nil
}

// invalidLog reports a stored log that parses but does not validate as a
// log: corruption (a *session.CorruptError, so IsCorruption holds),
// except an unknown event type, which is a log this build cannot read
// rather than a damaged one.
func invalidLog(path string, err error) error {
	var unsupported *session.UnsupportedTypeError
	if errors.As(err, &unsupported) {
		return err
	}
	seq := int64(-1)
	var ee *session.EventError
	if errors.As(err, &ee) {
		seq = ee.Seq
	}
	return &session.CorruptError{Path: path, Offset: -1, Seq: seq, Err: err}
}

// ReadFrom returns the stored events from seq from on (see Reader): the
// valid prefix of the file as it is, with no repair and no closers. The
// events of a torn tail are not returned, except the complete records of
// a torn final zstd frame, which are stored bytes (and which Load would
// re-append). A from past the end returns none.
func (s *JSONLStore) ReadFrom(ctx context.Context, id session.SessionID, from int64) ([]session.Event, error) {
	st, err := s.lock(id)
	if err != nil {
		return nil, err
	}
	defer s.unlock(st)
	if err := ctxErr(ctx); err != nil {
		return nil, fmt.Errorf("persister: read %s: %w", id, err)
	}
	if from < 0 {
		return nil, fmt.Errorf("persister: read %s from seq %d: negative seq", id, from)
	}
	if err := s.readable(ctx, st, false); err != nil {
		return nil, fmt.Errorf("persister: read %s: %w", id, err)
	}
	file, _, _, err := s.read(st)
	if err != nil {
		return nil, fmt.Errorf("persister: read %s: %w", id, err)
	}
	if from >= int64(len(file.Events)) {
		return nil, nil
	}
	return file.Events[from:], nil
}

// readable finds st's file for a read, ErrNotFound if nothing is stored,
// takes the writer lock if lock is set, and removes what a failed append
// left (which must not be read as stored).
func (s *JSONLStore) readable(ctx context.Context, st *jsonlSession, lock bool) error {
	found, err := s.find(ctx, st)
	if err != nil {
		return err
	}
	if !found {
		return ErrNotFound
	}
	if lock {
		if err := s.writerLock(st, filepath.Dir(st.path)); err != nil {
			return err
		}
	}
	return s.clean(st)
}

// clean removes what a failed append left past st.size, if anything. By
// the invariant of jsonlSession.held, the store holds the lock when there
// is something to remove.
func (s *JSONLStore) clean(st *jsonlSession) error {
	if !st.dirty {
		return nil
	}
	f, err := s.acquire(st.path)
	if err != nil {
		return err
	}
	err = truncateBack(f, st.size)
	if err == nil {
		st.dirty = false
	}
	s.release(st.path, f, err == nil)
	return err
}

// maxReadAttempts bounds the re-reads of a file that changes while read.
const maxReadAttempts = 5

// read reads and parses st's file, streaming it (readLog). Like the
// reference it retries until the file's stat before the read equals the
// one after, so the events and the revision belong together. It checks
// that the header is the session's and maps to the path it was found at,
// and records it in st. It returns the stat and the byte size read.
func (s *JSONLStore) read(st *jsonlSession) (*session.File, fs.FileInfo, int64, error) {
	var file *session.File
	var size int64
	var fi fs.FileInfo
	var err error
	for attempt := 1; ; attempt++ {
		before, serr := s.fs.Stat(st.path)
		if serr != nil {
			return nil, nil, 0, serr
		}
		file, size, err = readLog(s.fs, st.path, s.reading)
		var rerr *readError
		if errors.As(err, &rerr) {
			return nil, nil, 0, rerr.err
		}
		if fi, serr = s.fs.Stat(st.path); serr != nil {
			return nil, nil, 0, serr
		}
		// A parse error of a file that changed meanwhile says nothing.
		if fileRevision(before) == fileRevision(fi) && fi.Size() == size {
			break
		}
		if attempt == maxReadAttempts {
			return nil, nil, 0, fmt.Errorf("%s kept changing while read", st.path)
		}
	}
	if errors.Is(err, session.ErrNoHeader) {
		// The artifact is published whole, header first, so a missing
		// header is damage, not a write in progress. (The sentinel, not
		// err: the CorruptError names the path, err names it too.)
		return nil, nil, 0, &session.CorruptError{Path: st.path, Line: 1, Seq: -1, Err: session.ErrNoHeader}
	}
	if err != nil {
		return nil, nil, 0, err
	}
	if file.Header.ID != st.id || s.Locate(file.Header) != st.path {
		return nil, nil, 0, &session.CorruptError{Path: st.path, Line: 1, Seq: -1,
			Err: fmt.Errorf("%w: header of session %q (cwd %q) does not belong at this path", ErrLayout, file.Header.ID, file.Header.Cwd)}
	}
	st.header = file.Header
	return file, fi, size, nil
}

// find locates st's artifact on disk, caching the path: it looks for the
// id's directory in every project directory, since the path depends on
// the cwd, which only the header knows. Found twice is ErrLayout; the
// other encoding is ErrLayout.
func (s *JSONLStore) find(ctx context.Context, st *jsonlSession) (bool, error) {
	if err := s.removeOrphan(st); err != nil {
		return false, err
	}
	if st.path != "" {
		return true, nil
	}
	projects, err := s.fs.ReadDir(s.root)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	seg := EncodeSegment(string(st.id))
	var found string
	for _, p := range projects {
		if err := ctxErr(ctx); err != nil {
			return false, err
		}
		if !p.IsDir() {
			continue
		}
		dir := filepath.Join(s.root, p.Name(), seg)
		if _, err := s.fs.Stat(filepath.Join(dir, s.other)); err == nil {
			return false, fmt.Errorf("%w: %s holds a %s", ErrLayout, dir, s.other)
		}
		path := filepath.Join(dir, s.artifact)
		_, err := s.fs.Stat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return false, err
		case found != "":
			return false, fmt.Errorf("%w: session %s is stored twice: %s and %s", ErrLayout, st.id, found, path)
		}
		found = path
	}
	if found == "" {
		return false, nil
	}
	if torn, err := s.tornCreation(found); err != nil || torn {
		return false, err
	}
	if err := Superseded(s.fs, found); err != nil {
		return false, err
	}
	// A file published after Create (by another store) wins over the
	// registration.
	st.path, st.known, st.registered = found, false, false
	return true, nil
}

// removeOrphan unlinks st's orphan, if any.
func (s *JSONLStore) removeOrphan(st *jsonlSession) error {
	if st.orphan == "" {
		return nil
	}
	if err := s.fs.Remove(st.orphan); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("unlink the artifact of a failed first append: %w", err)
	}
	s.setOrphan(st, "")
	return nil
}

// List returns the materialized sessions with their revisions, sorted by
// id (see Reader). It reads only each artifact's header: the first line,
// or the first zstd frame. Files without a complete header (empty or
// half-written), whose first line is not a session header, or whose header
// frame is damaged are skipped; a header of another format version is an
// error (a newer harness wrote into this root). A header whose id and cwd
// do not map to its path, or an id stored twice, is ErrLayout.
func (s *JSONLStore) List(ctx context.Context) ([]Listed, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	if err := ctxErr(ctx); err != nil {
		return nil, fmt.Errorf("persister: list: %w", err)
	}
	var out []Listed
	seen := map[session.SessionID]string{}
	err := s.walk(ctx, func(path string) error {
		if s.isOrphan(path) {
			return nil
		}
		h, fi, err := s.readHeader(path)
		var corrupt *session.CorruptError
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, session.ErrNoHeader),
			errors.Is(err, session.ErrNotHeader), errors.As(err, &corrupt):
			return nil
		case err != nil:
			return err
		case s.Locate(h) != path:
			return fmt.Errorf("%w: header of session %q (cwd %q) does not belong at %s", ErrLayout, h.ID, h.Cwd, path)
		}
		if prev, dup := seen[h.ID]; dup {
			return fmt.Errorf("%w: session %s is stored twice: %s and %s", ErrLayout, h.ID, prev, path)
		}
		seen[h.ID] = path
		l := Listed{Header: h, Revision: fileRevision(fi)}
		var sup *SupersededError
		if err := Superseded(s.fs, path); errors.As(err, &sup) {
			l.Superseded = sup.Newer
		} else if err != nil {
			return err
		}
		out = append(out, l)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("persister: list: %w", err)
	}
	slices.SortFunc(out, func(a, b Listed) int { return strings.Compare(string(a.Header.ID), string(b.Header.ID)) })
	return out, nil
}

// headerPrefix is what readHeader reads first; a header line is far
// shorter.
const headerPrefix = 4 << 10

// readHeader reads the header of the artifact at path from its first
// bytes, reading on only when the header does not fit.
func (s *JSONLStore) readHeader(path string) (session.Header, fs.FileInfo, error) {
	f, err := s.fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return session.Header{}, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return session.Header{}, nil, err
	}
	for n := int64(headerPrefix); ; n *= 4 {
		buf := make([]byte, min(n, fi.Size()))
		k, err := f.ReadAt(buf, 0)
		if err != nil && k < len(buf) {
			return session.Header{}, nil, err
		}
		h, err := session.ParseFileHeader(buf[:k], path)
		if err == nil || !errors.Is(err, session.ErrNoHeader) || int64(k) >= fi.Size() {
			return h, fi, err
		}
	}
}

// walk visits the artifact path of every session directory under the
// root (fn may be nil, to check the layout only; the artifact need not
// exist). It refuses the obsolete flat layout and the other encoding.
func (s *JSONLStore) walk(ctx context.Context, fn func(path string) error) error {
	projects, err := s.fs.ReadDir(s.root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, p := range projects {
		if !p.IsDir() {
			continue
		}
		pdir := filepath.Join(s.root, p.Name())
		entries, err := s.fs.ReadDir(pdir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := ctxErr(ctx); err != nil {
				return err
			}
			if !e.IsDir() {
				if isFlatArtifact(e.Name()) {
					return fmt.Errorf("%w: %s is in the obsolete flat layout <project>/<id>.jsonl", ErrLayout, filepath.Join(pdir, e.Name()))
				}
				continue
			}
			sdir := filepath.Join(pdir, e.Name())
			if _, err := s.fs.Stat(filepath.Join(sdir, s.other)); err == nil {
				return fmt.Errorf("%w: %s holds a %s, this store writes %s", ErrLayout, sdir, s.other, s.artifact)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			if fn != nil {
				if err := fn(filepath.Join(sdir, s.artifact)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Close syncs what appends without durable wrote (a barrier of every
// session), closes the cached handles and releases every writer lock.
// Later calls, Close included, fail with ErrClosed. Operations in progress
// finish; their handles are closed as they return them, and a session's
// lock is released only once the operation in progress on it has
// finished: releasing it under a write would let another writer in while
// this one still writes.
func (s *JSONLStore) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.closed = true
	files := s.handles.drain()
	sessions := slices.Collect(maps.Values(s.sessions))
	s.mu.Unlock()
	var errs []error
	for _, f := range files {
		errs = append(errs, f.Close())
	}
	// A session not in the map holds no lock and nothing unsynced (unlock
	// keeps those that do: they have a path), and no lock is taken after
	// closed is set (writerLock).
	for _, st := range sessions {
		st.mu.Lock()
		if st.unsynced() {
			errs = append(errs, s.closeSync(st))
		}
		if st.held != nil {
			errs = append(errs, st.held.Release())
			st.held = nil
		}
		st.mu.Unlock()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("persister: close: %w", err)
	}
	return nil
}

// closeSync syncs st's file for Close through a descriptor of its own
// (the cache is closed). A failure is reported; the bytes past the last
// sync are left as a crash would find them: a torn tail the next Load
// truncates.
func (s *JSONLStore) closeSync(st *jsonlSession) error {
	f, err := s.fs.OpenFile(st.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	err = vfs.Datasync(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.syncName(st)
	}
	if err == nil {
		st.markSynced()
	}
	return err
}

func (s *JSONLStore) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// lock returns id's state with its mutex held, or ErrClosed.
func (s *JSONLStore) lock(id session.SessionID) (*jsonlSession, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	st := s.sessions[id]
	if st == nil {
		st = &jsonlSession{id: id}
		s.sessions[id] = st
	}
	st.refs++
	s.mu.Unlock()
	st.mu.Lock()
	if s.isClosed() {
		// Closed while this waited for the session: Close may have
		// released its lock already, so nothing may be written.
		s.unlock(st)
		return nil, ErrClosed
	}
	return st, nil
}

// unlock releases st, forgetting it when it holds nothing worth keeping
// (an id that was only looked up) and nobody else waits for it. st.mu is
// held while the store's mu is taken: the lock order.
func (s *JSONLStore) unlock(st *jsonlSession) {
	s.mu.Lock()
	st.refs--
	if st.refs == 0 && !st.registered && st.path == "" && st.orphan == "" && st.held == nil && s.sessions[st.id] == st {
		delete(s.sessions, st.id)
	}
	s.mu.Unlock()
	st.mu.Unlock()
}

// acquire takes path's append handle out of the cache, or opens one. The
// caller owns it until release. Handles in use are never in the cache, so
// eviction never closes a handle under an append.
func (s *JSONLStore) acquire(path string) (vfs.File, error) {
	s.mu.Lock()
	f := s.handles.take(path)
	s.mu.Unlock()
	if f != nil {
		return f, nil
	}
	return s.fs.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
}

// dropHandle closes path's cached handle, if any.
func (s *JSONLStore) dropHandle(path string) {
	s.mu.Lock()
	f := s.handles.take(path)
	s.mu.Unlock()
	if f != nil {
		// Closing loses nothing: bytes not synced yet are in the page
		// cache, st records them as unsynced, and the next barrier syncs
		// the file through another descriptor.
		_ = f.Close()
	}
}

// release returns a handle to the cache (keep), or closes it: after an
// error, whatever the handle's state, the next operation opens afresh.
func (s *JSONLStore) release(path string, f vfs.File, keep bool) {
	var evicted []vfs.File
	s.mu.Lock()
	if keep && !s.closed {
		evicted = s.handles.put(path, f)
	} else {
		evicted = []vfs.File{f}
	}
	s.mu.Unlock()
	for _, e := range evicted {
		_ = e.Close() // see dropHandle: a barrier syncs what it wrote
	}
}

// ctxErr returns the context's cause once it is done.
func ctxErr(ctx context.Context) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// handleCache is a bounded LRU of append handles by path. Not safe for
// concurrent use: the store's mu guards it.
type handleCache struct {
	max    int
	order  *list.List // of *cachedHandle; front is the most recently used
	byPath map[string]*list.Element
}

type cachedHandle struct {
	path string
	f    vfs.File
}

func newHandleCache(maxOpen int) handleCache {
	return handleCache{max: maxOpen, order: list.New(), byPath: map[string]*list.Element{}}
}

// take removes and returns path's handle, nil if none.
func (c *handleCache) take(path string) vfs.File {
	el, ok := c.byPath[path]
	if !ok {
		return nil
	}
	delete(c.byPath, path)
	return c.order.Remove(el).(*cachedHandle).f
}

// put caches f as path's handle and returns the handles to close: those
// evicted beyond the bound, or f itself if path already has one.
func (c *handleCache) put(path string, f vfs.File) []vfs.File {
	if _, ok := c.byPath[path]; ok {
		return []vfs.File{f}
	}
	c.byPath[path] = c.order.PushFront(&cachedHandle{path: path, f: f})
	var evicted []vfs.File
	for c.order.Len() > c.max {
		h := c.order.Remove(c.order.Back()).(*cachedHandle)
		delete(c.byPath, h.path)
		evicted = append(evicted, h.f)
	}
	return evicted
}

// drain empties the cache and returns its handles.
func (c *handleCache) drain() []vfs.File {
	var out []vfs.File
	for el := c.order.Front(); el != nil; el = el.Next() {
		out = append(out, el.Value.(*cachedHandle).f)
	}
	c.order.Init()
	clear(c.byPath)
	return out
}

// Compile-time check that JSONLStore is a Store.
var _ Store = (*JSONLStore)(nil)
