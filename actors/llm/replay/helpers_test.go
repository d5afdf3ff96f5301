package replay

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/fixtures"
	"github.com/dshgo/dsh/messages"
)

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var anyRequest = llm.NewRequest(messages.CallConfig{Provider: "replay", Model: "m"}, "", nil, nil)

// corpusFile is a corpus log with its placeholders substituted.
type corpusFile struct {
	name string // relative to the corpus root
	path string
	data []byte // substituted
}

func corpus(t *testing.T) []corpusFile {
	t.Helper()
	root, err := fixtures.CorpusDir()
	require.NoError(t, err)
	paths, err := fixtures.CorpusFiles()
	require.NoError(t, err)
	var out []corpusFile
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		require.NoError(t, err)
		rel, err := filepath.Rel(root, p)
		require.NoError(t, err)
		out = append(out, corpusFile{name: rel, path: p, data: fixtures.Substitute(raw)})
	}
	require.NotEmpty(t, out)
	return out
}

func (c corpusFile) events(t *testing.T) []session.Event {
	t.Helper()
	f, err := session.ParseFile(c.data, c.path)
	require.NoError(t, err, c.name)
	require.Nil(t, f.Torn, c.name)
	return f.Events
}

// served is one stream call read to its end.
type served struct {
	chunks []string // chunk JSON texts
	err    error
}

// serve reads one call. When cancelAfter >= 0, the call's context is
// cancelled once that many chunks have arrived (an open group or a hang
// blocks until then).
func serve(t *testing.T, p llm.Provider, cancelAfter int) served {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var s served
	if cancelAfter == 0 {
		cancel(context.Canceled)
	}
	for c, err := range p.Stream(ctx, anyRequest) {
		require.NoError(t, s.err, "the stream went on after its error")
		if err != nil {
			s.err = err
			continue
		}
		s.chunks = append(s.chunks, c.JSON().String())
		if len(s.chunks) == cancelAfter {
			cancel(context.Canceled)
		}
	}
	return s
}

func failureOf(t *testing.T, err error) messages.LlmFailure {
	t.Helper()
	f, ok := llm.Failure(err)
	require.True(t, ok, "error %v is an LlmFailure", err)
	return f
}

// jsonl builds a log file from event lines (without seq: numbered here).
func jsonl(lines ...string) []byte {
	var b strings.Builder
	b.WriteString(`{"type":"session","version":0,"id":"t","createdAt":0,"cwd":"/tmp","delegationDepth":0}` + "\n")
	for i, l := range lines {
		// l is `{"type":...,"data":...}`; insert seq and time after type.
		typEnd := strings.Index(l, `,"data"`)
		b.WriteString(l[:typEnd])
		b.WriteString(`,"seq":` + itoa(i) + `,"time":0`)
		b.WriteString(l[typEnd:])
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

func itoa(i int) string { return strconv.Itoa(i) }

func parseEvents(t *testing.T, data []byte) []session.Event {
	t.Helper()
	f, err := session.ParseFile(data, "test.jsonl")
	require.NoError(t, err)
	return f.Events
}

// Event lines for hand-built logs.
func turnStart(n int) string { return `{"type":"turn/start","data":{"turn":` + itoa(n) + `}}` }
func stepStart(n, s int) string {
	return `{"type":"step/start","data":{"turn":` + itoa(n) + `,"step":` + itoa(s) + `}}`
}
func stepEnd(n, s int) string {
	return `{"type":"step/end","data":{"turn":` + itoa(n) + `,"step":` + itoa(s) + `}}`
}
func turnEnd(n int, reason string) string {
	return `{"type":"turn/end","data":{"turn":` + itoa(n) + `,"reason":` + reason + `}}`
}
func chunk(n, s int, c string) string {
	return `{"type":"assistant/chunk","data":{"turn":` + itoa(n) + `,"step":` + itoa(s) + `,"chunk":` + c + `}}`
}

const (
	cStart     = `{"type":"block-start","index":0,"blockType":"text"}`
	cDelta     = `{"type":"text-delta","index":0,"text":"hi"}`
	cEnd       = `{"type":"block-end","index":0,"block":{"type":"text","text":"hi"}}`
	cStop      = `{"type":"finish","reason":{"kind":"stop"}}`
	cErrFinish = `{"type":"finish","reason":{"kind":"error","failure":{"message":"busy","code":"SERVER"}}}`
	completed  = `{"kind":"completed"}`
	abortUser  = `{"kind":"aborted","reason":{"kind":"user"}}`
)
