package logreplay

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/dshgo/dsh/actors/llm/replay"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/fixtures"
	"github.com/dshgo/dsh/messages"
)

// Load reads a recording for Run: the log file at path, streamed (memory
// bounded by the log's events, whatever the file holds: session's doc.go,
// "Reading a file: bounded memory"), and the replay.override.json beside
// it, if any. A torn tail or an invalid log is an error.
func Load(path string) (*session.File, replay.Override, error) {
	f, err := session.ReadFile(path)
	return finishLoad(path, f, err)
}

// LoadFixture is Load for a reference snapshot: its placeholders are
// substituted first (fixtures.Substitute), except that "{{tools}}" stands
// for one minimal schema per tool name the recording calls (sorted), so
// that the replayed loop, which must offer those tools to run them, logs
// the same header. A snapshot is read whole to substitute its
// placeholders; the reference's are a few kilobytes.
func LoadFixture(path string) (*session.File, replay.Override, error) {
	data, err := ReadFixture(path)
	if err != nil {
		return nil, replay.Override{}, err
	}
	f, err := session.ParseFile(substituteFixture(data), path)
	return finishLoad(path, f, err)
}

// finishLoad checks the file read from path (or the error reading it) and
// reads the override beside it.
func finishLoad(path string, f *session.File, err error) (*session.File, replay.Override, error) {
	if err != nil {
		return nil, replay.Override{}, err
	}
	if f.Torn != nil {
		return nil, replay.Override{}, fmt.Errorf("%s: torn tail at byte %d (seq %d): %v", path, f.Torn.Offset, f.Torn.NextSeq, f.Torn.Cause())
	}
	if _, err := f.Log(); err != nil {
		return nil, replay.Override{}, err
	}
	op := filepath.Join(filepath.Dir(path), replay.OverrideFileName)
	if _, err := os.Stat(op); errors.Is(err, fs.ErrNotExist) {
		return f, replay.Override{}, nil
	}
	o, err := replay.ReadOverride(op)
	if err != nil {
		return nil, replay.Override{}, err
	}
	return f, o, nil
}

// maxFixtureBytes bounds a reference snapshot read whole (ReadFixture):
// the reference's are a few kilobytes, and a log that is not a snapshot
// is streamed instead.
const maxFixtureBytes = 64 << 20

// errFixtureTooLarge is the cause of ReadFixture's refusal, inside an
// *fs.PathError naming the file.
var errFixtureTooLarge = fmt.Errorf("larger than the %d MiB a reference snapshot may be", maxFixtureBytes>>20)

// ReadFixture reads the reference snapshot at path whole, to substitute
// its placeholders; a file larger than 64 MiB is refused (an
// *fs.PathError). The returned slice is owned by the caller.
func ReadFixture(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, maxFixtureBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFixtureBytes {
		return nil, &fs.PathError{Op: "read", Path: path, Err: errFixtureTooLarge}
	}
	return data, nil
}

// substituteFixture is fixtures.Substitute with "{{tools}}" standing for
// the tools the recording calls (see Load).
func substituteFixture(data []byte) []byte {
	const ph = `"{{tools}}"`
	if !bytes.Contains(data, []byte(ph)) {
		return fixtures.Substitute(data)
	}
	var names []string
	if f, err := session.ParseFile(fixtures.Substitute(data), "fixture.jsonl"); err == nil {
		for _, e := range f.Events {
			if c, ok := e.Payload().(session.ToolCall); ok && !slices.Contains(names, c.Name) {
				names = append(names, c.Name)
			}
		}
	}
	slices.Sort(names)
	js := make([]messages.JSON, 0, len(names))
	for _, n := range names {
		js = append(js, replayToolSchema(n).JSON())
	}
	return fixtures.Substitute(bytes.ReplaceAll(data, []byte(ph), messages.ArrayOf(js...).Bytes()))
}

// replayToolSchema is the minimal schema a fixture's "{{tools}}" gives a
// tool the recording calls.
func replayToolSchema(name string) messages.ToolSchema {
	return messages.ToolSchema{Name: name, Description: "replayed tool " + name,
		Parameters: messages.MustParseJSON(`{"type":"object"}`)}
}
