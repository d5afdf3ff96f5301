package persister

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/vfs"
)

// Append appends events (see Writer). An event a JSONL log cannot hold
// (session.CheckJSONL: an ignorable event typed as a packed-row tag, which
// a SQLite store holds) refuses the batch, matching session.ErrNotJSONL.
// The first append publishes the file
// with the header, durably; later ones write one batch, and a durable one
// then fsyncs the file (fdatasync on Linux), which covers the batches
// written before it without durable, through whatever descriptor: the
// cached handle may have been evicted and closed since. A failed append
// cuts the file back to its size at the last fsync.
func (s *JSONLStore) Append(ctx context.Context, id session.SessionID, events []session.Event, durable Durability) error {
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
		err = s.appendLocked(ctx, st, events, bool(durable))
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
	defer func() { s.release(st, f, keep) }()
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
//
// A failed sync of st's handle when the cache evicted it (release) fails
// this sync too, without syncing: the bytes written since the last
// fsync may be lost from the page cache, and the kernel reported that
// once, to the evicted handle.
func (s *JSONLStore) sync(st *jsonlSession, f vfs.File) error {
	err := s.evictionErr(st.path)
	if err == nil {
		err = vfs.Datasync(f)
	}
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
// are synced: the first barrier after a first append without durable,
// unless that append made the name durable already (nameSynced).
func (s *JSONLStore) syncName(st *jsonlSession) error {
	if !st.unnamed {
		return nil
	}
	if !st.nameSynced {
		if err := s.fs.SyncDir(filepath.Dir(st.path)); err != nil {
			return err
		}
	}
	st.unnamed, st.nameSynced = false, false
	return nil
}

// unpublish removes an unnamed artifact after a failed append: nothing
// of it was durable, so the session is back to registered, not stored.
// If the removal fails the artifact is st's orphan, removed before
// anything else is done (and the writer lock is kept meanwhile).
func (s *JSONLStore) unpublish(st *jsonlSession) error {
	path := st.path
	s.dropHandle(path)
	_ = s.evictionErr(path) // concerned the removed file's bytes
	st.registered, st.path, st.known, st.dirty, st.unnamed, st.nameSynced = true, "", false, false, false, false
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
	path := s.locate(st.header)
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
// durable the artifact is unnamed: written like any batch behind, its
// bytes not synced, and made durable by the session's next barrier; but
// its directory is fsynced now, behind, so that the barrier (the
// session's first turn end, most often) fsyncs only the file, as every
// later one does. f becomes the cached append handle.
//
// Rejected alternative: leaving the directory's fsync to the barrier, as
// this did before. It put a second fsync on the first turn end of every
// session whose first write was behind (every session of a paced run),
// where a turn end waits for it, instead of in the window before it.
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
		// The name, made durable now, off the barrier's path. A failure
		// fails nothing: the barrier fsyncs the directory itself then.
		st.nameSynced = s.fs.SyncDir(filepath.Dir(path)) == nil
	}
	s.release(st, f, true)
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
//
// The size check (an fstat) runs only while the store does not hold the
// session's writer lock: that is when another writer may have changed the
// file. Under the lock nobody else writes it (doc.go, "Writer fencing"),
// and taking the lock made st unknown, so the file was read once since;
// the check was an fstat per append, 3% of a paced dsh bench's CPU.
func (s *JSONLStore) settle(st *jsonlSession, f vfs.File) error {
	if st.dirty {
		if err := truncateBack(f, st.size); err != nil {
			return err
		}
		st.dirty = false
	}
	if st.known && st.held != nil {
		return nil
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
		return session.AppendRecords(dst, events, session.Packing(pack))
	}
	bp := getScratch()
	defer putScratch(bp)
	*bp = session.AppendRecords((*bp)[:0], events, session.Packing(pack))
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
