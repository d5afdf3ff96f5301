package logreplay

import (
	"bytes"
	"errors"
	"fmt"
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
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, replay.Override{}, err
	}
	if fixture {
		data = SubstituteFixture(data)
	}
	f, err := session.ParseFile(data, path)
	if err != nil {
		return nil, replay.Override{}, err
	}
	if f.Torn != nil {
		return nil, replay.Override{}, fmt.Errorf("%s: torn tail at byte %d (seq %d): %v", path, f.Torn.Offset, f.Torn.NextSeq, f.Torn.Err)
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
