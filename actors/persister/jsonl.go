package persister

import (
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
	"github.com/dshgo/dsh/internal/storefs/hook"
	"github.com/dshgo/dsh/internal/vfs"
)

// This file is the JSONL store (docs/log-format.md#jsonl-files): one log
// file per session, in the harness's interop format, written append-only
// through a vfs.FS. What follows is how the store writes and reads it.
//
// Format version 0 (layout.go has the directory layout:
// <root>/<projectKey(cwd)>/<encodeSegment(id)>/session.jsonl[.zstd],
// with session.lock beside it when writers lock; see Writer fencing in
// doc.go).
// A log is logical lines, each ending in "\n":
//
//	line 1     {"type":"session","version":0,"id":...,"createdAt":...,
//	            "cwd"?,"parentSession"?,"seedLength"?,"origin"?,
//	            "delegationDepth":...,"agentPreset"?}
//	line 2..   one storage record each: a session event as JSON
//	           {"seq","time","type","data",...}, or a packed chunk row
//	           standing for a run of ≥3 chunk events of one batch
//	           (docs/log-format.md#packed-chunk-rows)
//
// session.jsonl holds the lines as they are. session.jsonl.zstd (the
// default) holds them in independent zstd frames, each with a content
// checksum, so a reader can tell a frame cut short from a damaged one:
//
//	offset 0                                                          EOF
//	+--------------+----------------+----------------+-----+----------------+
//	| frame 0      | frame 1        | frame 2        | ... | frame n        |
//	| header line  | batch 1 lines  | batch 2 lines  |     | batch n lines  |
//	+--------------+----------------+----------------+-----+----------------+
//	frame = 28 B5 2F FD | frame header | blocks | xxhash64 checksum (4 bytes)
//
// Frame 0 holds exactly the header line; each later frame is one append
// batch (one Append, or one repair), decoding to whole lines.
// Recovery: a final frame (plain: a final line) cut short by a crash is a
// torn tail, as is damage after the last turn/end; Load truncates it (the
// zstd truncation point is the start of the torn frame; the complete
// records decoded from that frame are re-appended) and closes an open
// turn. Damage followed by a turn/end is corruption and is reported,
// never repaired.
//
// Write path. The first append of a session creates the artifact under
// its name (O_EXCL: two writers cannot both create it) and writes the
// header and the first batch in one write; a durable one then fdatasyncs
// it and fsyncs its directory, one without durable fsyncs only the
// directory (behind the turn, so that the session's next barrier, most
// often its first turn end, fsyncs only the file; if that directory fsync
// failed, the barrier fsyncs the directory after the file). The
// directory's own entry in the project directory is made durable before,
// by a fsync of the project directory that the first appends of
// concurrent new sessions share (one running, the next one covering every
// append that waited for it). The descriptor stays open as the session's
// append handle. A failed append before that first barrier removes the
// artifact (nothing of it was durable), and the session is back to
// registered: its events are appended again from seq 0. A crash before
// the directory fsync leaves no artifact, or, after it (or on a file
// system that made the name durable before the data), an artifact that
// ends inside its header (empty, most often): a torn creation. It stores nothing: List skips it, reads find
// no session, and the next first append of the id removes it and creates
// the artifact again (under the writer lock, so no live writer is in the
// middle of creating it). A crash after the header leaves a log with a
// torn tail, like any unsynced append; neither was acknowledged. A first
// append that fails unlinks what it created. Later appends write one
// encoded batch (one checksummed zstd frame, or the plain lines) at the
// end, and a durable one then fdatasyncs the file. The store tracks the
// file's size at its last
// fsync; a cached handle evicted with bytes unsynced is fdatasynced
// before it is closed, and if that fails the session's next barrier fails
// (ErrEvictedSync): the kernel reports a writeback error once, to the
// descriptors open at the time, so a barrier's fsync through a new
// descriptor could otherwise succeed over bytes that never reached the
// disk (docs/durability.md#failures). A failed append truncates the file back to
// the last synced size (through a new descriptor) and fsyncs, so a retry
// cannot store a seq twice. Bytes once acknowledged durable are never
// rewritten; the only rewrites are crash repair truncating a tail that was
// never acknowledged durable and a failed append cutting back what was
// written since the last fsync.
//
// Read path. Load and Inspect (and RepairFile) stream the file through
// session.Read and apply its scan rules: a torn tail (a final record
// without newline, a final zstd frame cut short, damage after the last
// turn/end) is dropped, damage before the last turn/end is corruption.
// Load commits crash repair: it truncates the torn tail and appends, as
// one batch, the complete records recovered from a torn zstd frame plus
// the closers of session.InterruptedTurnClosers. List reads only each
// file's header.
//
// Memory. Reading a log costs its events plus a bound, never the file's
// size nor its decompressed size: a plain file is streamed, each zstd
// frame is decoded as a stream with a window of at most 16 MiB (whatever
// its header asks for), an empty line costs nothing, and one line (the
// header or a record) may be at most JSONLConfig.MaxRecordBytes long,
// session.DefaultMaxRecordBytes (16 MiB) by default, the most dsh ever
// writes on one line (its packed rows stay under 1 MiB, and the session
// refuses a longer event at append; see session's doc.go). A longer
// line makes the log corrupt (a *session.CorruptError wrapping a
// *session.RecordTooLargeError that names the limit), never repaired.
// So a file of a few kilobytes that decompresses to a hundred MiB of
// newlines loads in a few MiB (see session's doc.go).
//
// Rejected alternative for the first append: publishing the file whole,
// through a temp file fsynced and then hard-linked to the artifact's name.
// No crash could leave a torn creation, but each new session would pay a
// file create, a fsync, a link and an unlink on top, and a fsync of the
// project directory of its own: about a seventh of the CPU of a run of
// short turns over many new sessions.
//
// Rejected alternative: rewriting the file through a temp file on every
// append (atomic, simple to reason about) copies the whole log per append
// and rewrites acknowledged bytes; appending plus truncate-on-failure is
// what the reference does and what an append-only log is for.

// DefaultMaxOpenFiles is JSONLConfig.MaxOpenFiles's default, unless a
// quarter of the process's descriptor limit is less (never under 256):
// enough for a handle per session of a host with thousands of resident
// sessions, so that a write does not reopen its file
// (docs/performance.md#append-handles).
const DefaultMaxOpenFiles = 4096

// JSONLConfig configures a JSONLStore. Every field but Root may be left
// zero.
type JSONLConfig struct {
	// Root is the directory holding the sessions. Required. It is created
	// (mode 0700) on the first write if missing.
	Root string
	// Plain writes plain session.jsonl files. Default false: the harness's
	// default session.jsonl.zstd, one checksummed zstd frame for the header
	// line and one per durable batch. A root holds one encoding only.
	Plain bool
	// NoPack writes every chunk event on its own line. Default false: runs of
	// three or more chunk deltas within a batch are packed into one row
	// (docs/log-format.md#packed-chunk-rows), as the harness's packChunks=true
	// does. Reading accepts both either way.
	NoPack bool
	// MaxOpenFiles bounds the append handles kept open between appends,
	// least recently used closed first (synced first if its session has
	// bytes unsynced). Default DefaultMaxOpenFiles, or a
	// quarter of the process's descriptor limit (ulimit -n) if that is
	// less, but at least 256. An
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

// validate checks the configuration.
func (c JSONLConfig) validate() error {
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
// root's sessions in the process (one live writer per session per process,
// docs/log-format.md#jsonl-files); a change made behind its back is noticed
// (the file's size differs from what the store last wrote) and the file is
// read again before an append is fenced. With JSONLConfig.Lock it also
// excludes writers in other processes (doc.go, "Writer fencing").
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
	// evicting holds, by path, a channel closed once the handle evicted
	// from the cache for that path is synced and closed (release), and
	// evictFailed the error of such a sync that failed, until the next
	// sync of the path reports it (evictionErr); both guarded by mu.
	evicting    map[string]chan struct{}
	evictFailed map[string]error
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
	// without durable) and has not made its bytes durable since. The
	// first append fsyncs the directory, behind (nameSynced says it did),
	// so that the next barrier fsyncs only the file; if it did not, the
	// barrier fsyncs the file and then the directory. A failure before
	// that barrier removes the artifact, since nothing of it was durable
	// (a crash may keep a name whose bytes it dropped: a torn creation,
	// which stores nothing). Invariant: unnamed implies syncedNext and
	// syncedSize are 0.
	unnamed    bool
	nameSynced bool
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
	return newJSONLStore(cfg, vfs.OS())
}

func init() {
	hook.NewJSONL = func(cfg any, fsys vfs.FS) (any, error) {
		return newJSONLStore(cfg.(JSONLConfig), fsys)
	}
}

// newJSONLStore is NewJSONLStore writing through fsys: the constructor of
// this package's tests, and of the module's through internal/storefs
// (init installs it there).
func newJSONLStore(cfg JSONLConfig, fsys vfs.FS) (*JSONLStore, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.MaxOpenFiles == 0 {
		cfg.MaxOpenFiles = defaultMaxOpenFiles(descriptorLimit())
	}
	if cfg.Lock && cfg.Holder == "" {
		cfg.Holder = defaultHolder()
	}
	s := &JSONLStore{
		fs:       fsys,
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

		evicting:    map[string]chan struct{}{},
		evictFailed: map[string]error{},
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
func (s *JSONLStore) locate(h session.Header) string {
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

// Close syncs what appends without durable wrote (a barrier of every
// session), closes the cached handles and releases every writer lock.
// Later calls, Close included, fail with ErrClosed. Operations in progress
// finish; their handles are closed as they return them (synced first if
// their session has bytes unsynced, as an evicted handle is), and a session's
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
	drained := s.handles.drain()
	sessions := slices.Collect(maps.Values(s.sessions))
	s.mu.Unlock()
	// A cached handle syncs its session's unsynced bytes (closeSync).
	var errs []error
	cached := make(map[string]vfs.File, len(drained))
	for _, h := range drained {
		cached[h.path] = h.f
	}
	// A session not in the map holds no lock and nothing unsynced (unlock
	// keeps those that do: they have a path), and no lock is taken after
	// closed is set (writerLock).
	for _, st := range sessions {
		st.mu.Lock()
		f := cached[st.path]
		delete(cached, st.path)
		if st.unsynced() {
			errs = append(errs, s.closeSync(st, f))
		} else if f != nil {
			errs = append(errs, f.Close())
		}
		if st.held != nil {
			errs = append(errs, st.held.Release())
			st.held = nil
		}
		st.mu.Unlock()
	}
	for _, f := range cached { // a session gone from the map meanwhile
		errs = append(errs, f.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("persister: close: %w", err)
	}
	return nil
}

// closeSync syncs st's file for Close (sync) through f, its handle from
// the cache, or else a descriptor of its own, opened once a sync of its
// evicted handle has finished (acquire), and closes it. A failure is
// reported; the bytes past the last sync are left as a crash would find
// them: a torn tail the next Load truncates.
func (s *JSONLStore) closeSync(st *jsonlSession, f vfs.File) error {
	if f == nil {
		var err error
		if f, err = s.acquire(st.path); err != nil {
			return err
		}
	}
	err := s.sync(st, f)
	if cerr := f.Close(); err == nil {
		err = cerr
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

// ctxErr returns the context's cause once it is done.
func ctxErr(ctx context.Context) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// Compile-time check that JSONLStore is a Store.
var _ Store = (*JSONLStore)(nil)
