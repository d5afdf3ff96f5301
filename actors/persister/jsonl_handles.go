package persister

import (
	"container/list"
	"os"

	"github.com/dshgo/dsh/internal/vfs"
)

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
