package spans_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/fixtures"
	"github.com/dshgo/dsh/telemetry/spans"
)

// The spans of a recorded session, computed from its log alone: a trace per
// turn, rooted at the turn's span, with a span per step and, under it, a
// span per model call. The ids are hashes of the session id and the span's
// position, so the same log always gives the same trace.
func Example() {
	dir, err := fixtures.CorpusDir()
	if err != nil {
		panic(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "acp", "error-finish", "session.jsonl"))
	if err != nil {
		panic(err)
	}
	f, err := session.Read(bytes.NewReader(fixtures.Substitute(data)), "session.jsonl", session.ReadOptions{})
	if err != nil {
		panic(err)
	}
	for _, s := range spans.Spans(f.Header.ID, 0, f.Events) {
		fmt.Printf("%s parent=%v status=%s %q\n", s.Name, s.Parent.IsValid(), s.Status, s.StatusMessage)
	}
	fmt.Println(spans.TraceID(f.Header.ID, 1) == spans.Spans(f.Header.ID, 0, f.Events)[0].TraceID)
	// Output:
	// turn parent=false status=Error "simulated provider error (HTTP 401)"
	// step parent=true status=Unset ""
	// chat deepseek-v4-flash parent=true status=Error "simulated provider error (HTTP 401)"
	// true
}
