package persister

import (
	"fmt"
	"path/filepath"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/vfs"
)

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
	if holder, locked := vfs.LockHolder(err); locked {
		return &LockedError{ID: st.id, Path: path, Holder: holder}
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
		s.release(st, f, err == nil)
	}
	if err != nil {
		if cerr := s.cutBack(st); cerr != nil {
			return fmt.Errorf("%w; then %w", err, cerr)
		}
	}
	return err
}
