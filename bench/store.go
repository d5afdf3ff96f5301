package bench

import (
	"context"
	"fmt"
	"os"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
)

// storeStats is diskStats for a store that is one file (a SQLite
// database) rather than a directory of logs: the bytes on disk are the
// database's and its write-ahead log's; the raw bytes are what its
// sessions take as JSONL (header and records, chunk runs packed), so that
// the ratio compares with a JSONL directory's. Each session counts as a
// file. With verify every session is read back through the store opened
// read-only, and must load as it was written: no torn tail, no open turn.
func storeStats(ctx context.Context, loc persister.Location, verify bool, rep *Report) ([]loggedSession, error) {
	for _, p := range []string{loc.Path, loc.Path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			rep.BytesOnDisk += fi.Size()
		}
	}
	r, err := persister.OpenReader(loc.String())
	if err != nil {
		return nil, err
	}
	defer r.Close()
	// The run's own context may be cancelled (an interrupted run still
	// reports what it wrote).
	ctx = context.WithoutCancel(ctx)
	listed, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	var logs []loggedSession
	var bad []string
	var buf []byte
	for _, l := range listed {
		rep.Files++
		st, err := r.Inspect(ctx, l.Header.ID)
		if err == nil && (st.Torn != nil || len(st.Closers) > 0) {
			err = fmt.Errorf("not closed cleanly (torn tail or open turn)")
		}
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s session %s: %v", loc, l.Header.ID, err))
			continue
		}
		buf = append(buf[:0], st.Header.JSON().String()...)
		buf = session.AppendRecords(append(buf, '\n'), st.Events, session.PackChunks)
		rep.BytesRaw += int64(len(buf))
		if verify {
			rep.FilesVerified++
			logs = append(logs, loggedSession{header: st.Header, events: st.Events})
		}
	}
	if rep.BytesOnDisk > 0 {
		rep.CompressionRatio = float64(rep.BytesRaw) / float64(rep.BytesOnDisk)
	}
	if verify && len(bad) > 0 {
		return nil, fmt.Errorf("bench: %d invalid logs, first: %s", len(bad), bad[0])
	}
	return logs, nil
}
