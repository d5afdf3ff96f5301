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

// Load reads a recording for Run: the log file at path and the
// replay.override.json beside it, if any. A torn tail or an invalid log
// is an error. With fixture, the reference snapshot placeholders are
// substituted first (fixtures.Substitute), except that "{{tools}}" stands
// for one minimal schema per tool name the recording calls (sorted), so
// that the replayed loop, which must offer those tools to run them,
// logs the same header.
func Load(path string, fixture bool) (*session.File, replay.Override, error) {
	var f *session.File
	var err error
	if fixture {
		// A snapshot is read whole to substitute its placeholders; the
		// reference's are a few kilobytes.
		var data []byte
		if data, err = ReadFixture(path); err != nil {
			return nil, replay.Override{}, err
		}
		f, err = session.ParseFile(SubstituteFixture(data), path)
	} else {
		// Streamed: memory bounded by the log's events, whatever the file
		// holds (session's doc.go, "Reading a file: bounded memory").
		f, err = session.ReadFile(path)
	}
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

// MaxFixtureBytes bounds a reference snapshot read whole (ReadFixture):
// the reference's are a few kilobytes, and a log that is not a snapshot
// is streamed instead.
const MaxFixtureBytes = 64 << 20

// errFixtureTooLarge is the cause of ReadFixture's refusal, inside an
// *fs.PathError naming the file.
var errFixtureTooLarge = fmt.Errorf("larger than the %d MiB a reference snapshot may be", MaxFixtureBytes>>20)

// ReadFixture reads the reference snapshot at path whole, to substitute
// its placeholders; a file larger than MaxFixtureBytes is refused (an
// *fs.PathError). The returned slice is owned by the caller.
func ReadFixture(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, MaxFixtureBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFixtureBytes {
		return nil, &fs.PathError{Op: "read", Path: path, Err: errFixtureTooLarge}
	}
	return data, nil
}

// SubstituteFixture is fixtures.Substitute with "{{tools}}" standing for
// the tools the recording calls (see Load).
func SubstituteFixture(data []byte) []byte {
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
		js = append(js, ReplayToolSchema(n).JSON())
	}
	return fixtures.Substitute(bytes.ReplaceAll(data, []byte(ph), messages.ArrayOf(js...).Bytes()))
}

// ReplayToolSchema is the minimal schema a fixture's "{{tools}}" gives a
// tool the recording calls.
func ReplayToolSchema(name string) messages.ToolSchema {
	return messages.ToolSchema{Name: name, Description: "replayed tool " + name,
		Parameters: messages.MustParseJSON(`{"type":"object"}`)}
}
