package persister

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dshgo/dsh/actors/session"
)

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
	s.release(st, f, err == nil)
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
	s.release(st, f, err == nil)
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
	if file.Header.ID != st.id || s.locate(file.Header) != st.path {
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
	if err := superseded(s.fs, found); err != nil {
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
		case s.locate(h) != path:
			return fmt.Errorf("%w: header of session %q (cwd %q) does not belong at %s", ErrLayout, h.ID, h.Cwd, path)
		}
		if prev, dup := seen[h.ID]; dup {
			return fmt.Errorf("%w: session %s is stored twice: %s and %s", ErrLayout, h.ID, prev, path)
		}
		seen[h.ID] = path
		l := Listed{Header: h, Revision: fileRevision(fi)}
		var sup *SupersededError
		if err := superseded(s.fs, path); errors.As(err, &sup) {
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
