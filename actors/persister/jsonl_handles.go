package persister

import (
	"container/list"
	"errors"
	"fmt"
	"os"

	"github.com/dshgo/dsh/internal/vfs"
)

// ErrEvictedSync is the error of a JSONL sync refused because the sync
// of the session's append handle failed when the store's handle cache
// evicted it: the bytes written since the file's last fsync may be gone
// from the page cache. The append fails like any failed sync (cut back to
// the last synced size, retried by the persister).
var ErrEvictedSync = errors.New("persister: the sync of an evicted append handle failed")

// acquire takes path's append handle out of the cache, or opens one. The
// caller owns it until release. Handles in use are never in the cache, so
// eviction never closes a handle under an append. While the handle last
// evicted for path is being synced (release), acquire waits for that
// sync, so that a sync through the new handle cannot return before it.
func (s *JSONLStore) acquire(path string) (vfs.File, error) {
	s.mu.Lock()
	for {
		done := s.evicting[path]
		if done == nil {
			break
		}
		s.mu.Unlock()
		<-done
		s.mu.Lock()
	}
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
		// Closing it unsynced is safe only because every caller drops it
		// with nothing unsynced (after a barrier, or with the file about
		// to be removed): a writeback error is reported once, to the
		// descriptors open at the time (see release). The caller holds
		// path's session, so no write of it runs meanwhile.
		_ = f.Close()
	}
}

// release returns st's handle to the cache (keep), or closes it: after
// an error, whatever the handle's state, the next operation opens afresh.
//
// A handle the cache evicts to make room (another session's, idle) is
// synced before it is closed if its session had bytes unsynced when it was
// cached (docs/durability.md#failures): a writeback error of the bytes
// written through it is reported once, to a descriptor open at the time,
// so closing it unsynced could lose that report, and with it the only sign
// that those bytes are gone from the page cache. A failed sync is kept for
// the path (evictFailed), and the next sync of that session fails with it
// (sync), which cuts the file back to its last synced size. The evicted
// session's own operations are not held up by this but for an acquire of
// the same path, which waits. A handle cached with nothing unsynced (after
// a barrier) is closed as it is: nothing written through it can fail.
// A handle returned after Close has emptied the cache (an operation that
// was running) leaves it for good as an evicted one does: synced first if
// its session has bytes unsynced, a failure reported by Close's sync.
func (s *JSONLStore) release(st *jsonlSession, f vfs.File, keep bool) {
	s.mu.Lock()
	if !keep {
		s.mu.Unlock()
		_ = f.Close()
		return
	}
	unsynced := !st.known || st.unsynced()
	var dup vfs.File
	var evicted []cachedHandle
	if s.closed {
		evicted = []cachedHandle{{path: st.path, f: f, unsynced: unsynced}}
	} else {
		dup, evicted = s.handles.put(st.path, f, unsynced)
	}
	var done chan struct{}
	var syncs []cachedHandle
	var closes []vfs.File // closed as they are, once mu is released
	for _, h := range evicted {
		if !h.unsynced {
			closes = append(closes, h.f)
			continue
		}
		if done == nil {
			done = make(chan struct{})
		}
		s.evicting[h.path] = done
		syncs = append(syncs, h)
	}
	s.mu.Unlock()
	if dup != nil {
		_ = dup.Close() // the cached descriptor stays open to be synced
	}
	for _, c := range closes {
		_ = c.Close()
	}
	if len(syncs) == 0 {
		return
	}
	errs := make([]error, len(syncs))
	for i, h := range syncs {
		err := vfs.Datasync(h.f)
		if cerr := h.f.Close(); err == nil {
			err = cerr
		}
		errs[i] = err
	}
	s.mu.Lock()
	for i, h := range syncs {
		delete(s.evicting, h.path)
		if errs[i] != nil {
			s.evictFailed[h.path] = errs[i]
		}
	}
	s.mu.Unlock()
	close(done)
}

// evictionErr returns, and forgets, the error of a failed sync of path's
// handle when the cache evicted it (release), nil if there was none.
func (s *JSONLStore) evictionErr(path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.evictFailed[path]
	if err == nil {
		return nil
	}
	delete(s.evictFailed, path)
	return fmt.Errorf("%w: %w", ErrEvictedSync, err)
}

// defaultMaxOpenFiles is JSONLConfig.MaxOpenFiles's default under a
// descriptor limit of limit (0: unknown): a quarter of it, between 256 and
// DefaultMaxOpenFiles. A quarter leaves the rest to the writer locks (one
// per resident session) and to the process.
//
// Rejected alternative: 256 whatever the limit, as before. A host of a
// thousand sessions then reopened (and closed) a session's file on nearly
// every write, background ones included: 6% of the CPU of the paced run
// (docs/performance.md#append-handles).
func defaultMaxOpenFiles(limit uint64) int {
	const least = 256
	if limit == 0 {
		return DefaultMaxOpenFiles
	}
	return int(min(max(limit/4, least), DefaultMaxOpenFiles))
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
	// unsynced says its session had bytes not synced yet when the handle
	// was cached: its eviction syncs it (release).
	unsynced bool
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

// put caches f as path's handle (unsynced: see cachedHandle). It returns
// f itself as dup if path has a handle already, and the handles evicted
// beyond the bound: the caller closes them.
func (c *handleCache) put(path string, f vfs.File, unsynced bool) (dup vfs.File, evicted []cachedHandle) {
	if _, ok := c.byPath[path]; ok {
		return f, nil
	}
	c.byPath[path] = c.order.PushFront(&cachedHandle{path: path, f: f, unsynced: unsynced})
	for c.order.Len() > c.max {
		h := c.order.Remove(c.order.Back()).(*cachedHandle)
		delete(c.byPath, h.path)
		evicted = append(evicted, *h)
	}
	return nil, evicted
}

// drain empties the cache and returns its handles.
func (c *handleCache) drain() []cachedHandle {
	var out []cachedHandle
	for el := c.order.Front(); el != nil; el = el.Next() {
		out = append(out, *el.Value.(*cachedHandle))
	}
	c.order.Init()
	clear(c.byPath)
	return out
}
