package persister

import (
	"io"
	"os"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/vfs"
)

// readLog reads and scans the log at path through fsys, streaming it
// (session.Read), so that loading or repairing a log costs its events plus
// the reader's bounds (session's doc.go, "Reading a file: bounded
// memory"), never the file's size nor its decompressed size. It returns
// the bytes read with the scan's result. An error opening or reading the
// file comes back as a *readError holding the file system's error as it
// was; any other error is the scan's.
//
// Rejected: vfs.ReadFile then session.ParseFile: the whole file in memory
// on top of the events, and a plain file's size is what an attacker
// chooses.
func readLog(fsys vfs.FS, path string, opts session.ReadOptions) (*session.File, int64, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, 0, &readError{err: err}
	}
	defer f.Close()
	cr := &countingReader{r: f}
	file, err := session.Read(cr, path, opts)
	if cr.err != nil {
		return nil, cr.n, &readError{err: cr.err}
	}
	return file, cr.n, err
}

// readError is an I/O error of readLog, kept apart from the scan's.
type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// countingReader counts the bytes read through it and keeps the first
// error other than io.EOF.
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && err != io.EOF && c.err == nil {
		c.err = err
	}
	return n, err
}
