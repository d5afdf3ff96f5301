package persister

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/vfs"
)

// RepairReport says what RepairFile did.
type RepairReport struct {
	// SizeBefore and SizeAfter are the file's sizes in bytes.
	SizeBefore, SizeAfter int64
	// Torn is the torn tail that was cut (nil if the file ended cleanly).
	Torn *session.TornTail
	// Recovered is how many events of a torn zstd frame were kept and
	// written again.
	Recovered int
	// Closers are the events appended to close an open turn.
	Closers []session.Event
	// Events is the length of the repaired log.
	Events int64
}

// Changed reports whether the file was modified.
func (r RepairReport) Changed() bool { return r.Torn != nil || len(r.Closers) > 0 }

// RepairFile repairs one log file in place, wherever it is (it need not
// sit in a store's layout): the torn tail, if any, is truncated (the
// complete records of a torn zstd frame are kept), and an open turn is
// closed with the crash-repair closers; the re-appended records and the
// closers go in one batch in the file's own encoding, fsynced. Damage in
// the committed region is corruption (IsCorruption) and nothing is
// changed. A balanced, clean file is left untouched.
//
// RepairFile writes only under the writer lock of the file's directory
// (session.lock beside it, the lock every dsh writer of a session takes,
// see Writer fencing in doc.go): it takes that lock first, creating the
// lock file when there is none, and fails with a *LockedError naming the
// holder, changing nothing, while a writer (a dsh run, a member, another
// repair) holds it. Without the lock a repair would race a live writer:
// it truncates to the size it read, cutting whatever the writer appended
// meanwhile. A lock file left beside a file outside a store's layout is
// harmless: nothing but writers reads it.
func RepairFile(path string) (RepairReport, error) {
	fsys := vfs.OS()
	if _, err := fsys.Stat(path); err != nil {
		return RepairReport{}, fmt.Errorf("persister: repair: %w", err)
	}
	if err := superseded(fsys, path); err != nil {
		return RepairReport{}, fmt.Errorf("persister: repair: %w", err)
	}
	lockPath := filepath.Join(filepath.Dir(path), lockName)
	lk, err := fsys.Lock(lockPath, []byte("dsh log repair, "+defaultHolder()+"\n"))
	if err != nil {
		if holder, locked := vfs.LockHolder(err); locked {
			return RepairReport{}, &LockedError{ID: session.SessionID(filepath.Base(filepath.Dir(path))), Path: lockPath, Holder: holder}
		}
		return RepairReport{}, fmt.Errorf("persister: repair: take the writer lock: %w", err)
	}
	defer lk.Release()
	file, n, err := readLog(fsys, path, session.ReadOptions{})
	var rerr *readError
	if errors.As(err, &rerr) {
		err = rerr.err
	}
	if err != nil {
		return RepairReport{}, fmt.Errorf("persister: repair: %w", err)
	}
	if _, err := file.Log(); err != nil {
		return RepairReport{}, fmt.Errorf("persister: repair %s: %w", path, err)
	}
	r := RepairReport{SizeBefore: n, SizeAfter: n, Torn: file.Torn,
		Closers: session.InterruptedTurnClosers(file.Events)}
	r.Events = int64(len(file.Events) + len(r.Closers))
	if !r.Changed() {
		return r, nil
	}
	batch := slices.Clip(r.Closers)
	size := n
	if file.Torn != nil {
		r.Recovered = len(file.Torn.Recovered)
		batch = append(slices.Clip(file.Torn.Recovered), r.Closers...)
		size = file.Torn.Offset
	}
	f, err := fsys.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return RepairReport{}, fmt.Errorf("persister: repair: %w", err)
	}
	defer f.Close()
	// The file's own errors name its path: this layer says only what it
	// was doing.
	if err := truncateBack(f, size); err != nil {
		return RepairReport{}, fmt.Errorf("persister: repair: %w", err)
	}
	if len(batch) > 0 {
		buf := encodeBatch(nil, batch, file.Compressed, true)
		// No partial batch stays on failure; the torn tail is already gone,
		// so a second repair finds a clean file with the turn open.
		if err := appendSynced(f, size, buf); err != nil {
			return RepairReport{}, fmt.Errorf("persister: repair: %w", err)
		}
		size += int64(len(buf))
	}
	r.SizeAfter = size
	return r, nil
}

// truncateBackError marks an appendSynced failure whose truncation back
// failed too: the file may hold part of the batch.
type truncateBackError struct{ write, truncate error }

// Error is one line (errors.Join would put each error on a line of its
// own).
func (e *truncateBackError) Error() string {
	return fmt.Sprintf("%v; then %v", e.write, e.truncate)
}

func (e *truncateBackError) Unwrap() []error { return []error{e.write, e.truncate} }

// appendSynced writes buf at the end of f, whose size is size, and fsyncs.
// On failure it truncates f back to size (and fsyncs), so nothing of buf
// stays; when even that fails the error is a *truncateBackError.
func appendSynced(f vfs.File, size int64, buf []byte) error {
	_, err := f.Write(buf)
	if err == nil {
		err = vfs.Datasync(f)
	}
	if err == nil {
		return nil
	}
	if terr := truncateBack(f, size); terr != nil {
		return &truncateBackError{write: err, truncate: terr}
	}
	return err
}
