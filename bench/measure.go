package bench

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/dshgo/dsh/actors/session"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fdSampleEvery is how many heap samples (every 50 ms) go by between
// two counts of the open descriptors.
const fdSampleEvery = 5

const heapMetric = "/memory/classes/heap/objects:bytes"

func heapObjects() uint64 {
	s := []metrics.Sample{{Name: heapMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// openFDs counts the process's open file descriptors, -1 where
// /proc/self/fd is missing. The descriptor that reads the directory is not
// counted.
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents) - 1
}

// diskStats sizes the session files under dir, decodes them for the raw
// size and, when verify, validates each as a log.
func diskStats(dir string, verify bool, rep *Report) ([]loggedSession, error) {
	var logs []loggedSession
	// A stream decoder that counts the raw bytes rather than holding them
	// (DecodeAll held each file decompressed), with the window bound of
	// session's reader, and never decoding a small input whole.
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxWindow(16<<20), zstd.WithDecoderMaxMemory(16<<20), zstd.WithDecodeBuffersBelow(0))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	var bad []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() || !(name == "session.jsonl" || name == "session.jsonl.zstd") {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rep.Files++
		rep.BytesOnDisk += int64(len(data))
		if strings.HasSuffix(name, ".zstd") {
			err := dec.Reset(bytes.NewReader(data))
			var raw int64
			if err == nil {
				raw, err = io.Copy(io.Discard, dec)
			}
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: %v", p, err))
			}
			rep.BytesRaw += raw
		} else {
			rep.BytesRaw += int64(len(data))
		}
		if verify {
			f, err := session.ParseFile(data, p)
			if err == nil && f.Torn != nil {
				err = fmt.Errorf("torn tail")
			}
			if err == nil {
				_, err = f.Log()
			}
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: %v", p, err))
			} else {
				rep.FilesVerified++
				logs = append(logs, loggedSession{header: f.Header, events: f.Events})
			}
		}
		return nil
	})
	if rep.BytesOnDisk > 0 {
		rep.CompressionRatio = float64(rep.BytesRaw) / float64(rep.BytesOnDisk)
	}
	if err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("bench: %d invalid logs, first: %s", len(bad), bad[0])
	}
	return logs, nil
}
