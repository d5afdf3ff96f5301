package session

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

// Scenario 27: after a replace the derive cache rebuilds, and its result
// equals the projection of the surface folded from scratch; views handed
// out before the replace keep their contents.
func TestDerivedCacheRebuildsOnReplaceAndMatchesScratch(t *testing.T) {
	l := sampleLog(t)
	warm := l.DeriveMessages()
	warmCopy := warm.Slice()
	requireSameMessages(t, DeriveFromScratch(l.Events().Slice()), warmCopy)

	nodes := l.SurfaceNodes()
	summary := userText(t, "summary of the first turns")
	appendOK(t, l, UserMessage{Message: summary}.Draft().
		WithSurface(ReplaceOp(nodes[0], nodes[len(nodes)-2])).WithSources(nodes[:len(nodes)-1]))
	after := l.DeriveMessages()
	requireSameMessages(t, DeriveFromScratch(l.Events().Slice()), after.Slice())
	require.Equal(t, 2, after.Len())
	require.True(t, after.At(0).Equal(summary))
	requireSameMessages(t, warmCopy, warm.Slice())

	appendTextTurn(t, l, "next", "reply")
	requireSameMessages(t, DeriveFromScratch(l.Events().Slice()), l.DeriveMessages().Slice())
	require.Equal(t, 2, after.Len())
	requireSameMessages(t, warmCopy, warm.Slice())
}

// deriveModel drives a log through random, trace-valid histories: turns
// and steps with text, empty-anchor and tool-call completions, tool calls
// and results, compaction-style user/message replaces over random
// positional ranges and content-only tool/result replaces.
type deriveModel struct {
	t        *testing.T
	r        *rand.Rand
	l        *Log
	turn     int64 // open turn, 0 if none
	step     int64 // open step, 0 if none
	lastStep int64 // last step started in the open turn
	answered bool  // the open step has its assistant message
	pending  []string
	nextID   int
}

func (m *deriveModel) draft(d Draft) {
	m.t.Helper()
	appendOK(m.t, m.l, d)
}

func (m *deriveModel) id(prefix string) string {
	m.nextID++
	return fmt.Sprintf("%s-%d", prefix, m.nextID)
}

// mutate makes one random valid change to the log.
func (m *deriveModel) mutate() {
	r := m.r
	switch k := r.Intn(10); {
	case k == 0:
		m.replaceUsers()
		return
	case k == 1 && m.turn != 0:
		if m.replaceResult() {
			return
		}
	case k == 2:
		m.draft(UserMessage{Message: userText(m.t, m.id("user"))}.Draft())
		return
	}
	switch {
	case m.turn == 0:
		m.turn, m.lastStep = m.l.Turns()+1, 0
		m.draft(TurnStart{Turn: m.turn}.Draft())
		m.draft(UserMessage{Message: userText(m.t, m.id("prompt"))}.Draft())
	case m.step == 0 && m.lastStep > 0 && r.Intn(3) == 0:
		m.draft(TurnEnd{Turn: m.turn, Reason: TurnEndReason{Kind: EndCompleted}}.Draft())
		m.turn = 0
	case m.step == 0:
		m.lastStep++
		m.step = m.lastStep
		m.draft(StepStart{Turn: m.turn, Step: m.step}.Draft())
		m.answered, m.pending = false, nil
	case !m.answered:
		m.completion()
	case len(m.pending) > 0:
		id := m.pending[0]
		m.pending = m.pending[1:]
		m.draft(ToolCall{Turn: m.turn, Step: m.step, CallID: id, Name: "read", Arguments: "{}"}.Draft())
		res := ToolResult{Turn: m.turn, Step: m.step, Message: toolResultOf(id, m.id("output"))}
		if r.Intn(2) == 0 {
			res.Error = ToolError{Name: "ToolFailed", Code: "FAILED"}
		}
		m.draft(res.Draft().WithSources([]int64{m.l.Len() - 1}))
	default:
		m.draft(StepEnd{Turn: m.turn, Step: m.step}.Draft())
		m.step = 0
	}
}

// completion appends the step's chunks and assistant message: text, an
// empty-content anchor, or tool calls.
func (m *deriveModel) completion() {
	r := m.r
	var sources []int64
	for range r.Intn(4) {
		c := AssistantChunk{Turn: m.turn, Step: m.step, Chunk: messages.TextDeltaChunk(0, m.id("delta"))}
		m.draft(c.Draft())
		sources = append(sources, m.l.Len()-1)
	}
	var blocks []messages.ContentBlock
	switch r.Intn(3) {
	case 0: // empty anchor
	case 1:
		blocks = append(blocks, messages.TextBlock(m.id("reply")))
	case 2:
		for range 1 + r.Intn(2) {
			id := m.id("call")
			blocks = append(blocks, messages.ToolCallBlock(id, "read", "{}"))
			m.pending = append(m.pending, id)
		}
	}
	a := AssistantMessage{Turn: m.turn, Step: m.step, Message: assistantOf(m.t, blocks...)}
	d := a.Draft()
	if len(sources) > 0 || r.Intn(2) == 0 {
		d = d.WithSources(sources) // may be the explicit empty list
	}
	m.draft(d)
	m.answered = true
}

// replaceUsers replaces a random positional range of the surface with a
// summary user message, citing the shadowed nodes or not.
func (m *deriveModel) replaceUsers() {
	nodes := m.l.SurfaceNodes()
	if len(nodes) == 0 {
		m.draft(UserMessage{Message: userText(m.t, m.id("user"))}.Draft())
		return
	}
	i := m.r.Intn(len(nodes))
	j := i + m.r.Intn(len(nodes)-i)
	d := UserMessage{Message: userText(m.t, m.id("summary"))}.Draft().WithSurface(ReplaceOp(nodes[i], nodes[j]))
	if m.r.Intn(2) == 0 {
		d = d.WithSources(nodes[i : j+1])
	}
	m.draft(d)
}

// replaceResult prunes the content of a random current tool/result, and
// reports whether there was one.
func (m *deriveModel) replaceResult() bool {
	var results []int64
	for _, n := range m.l.SurfaceNodes() {
		if e, _ := m.l.Event(n); e.Type() == TypeToolResult {
			results = append(results, n)
		}
	}
	if len(results) == 0 {
		return false
	}
	seq := results[m.r.Intn(len(results))]
	m.draft(prunedResult(m.t, m.l, seq, m.id("pruned")).Draft().WithSurface(ReplaceOp(seq, seq)).WithSources([]int64{seq}))
	return true
}

// oldView is a view handed out earlier, with a copy of what it showed.
type oldView struct {
	view Messages
	want []messages.Message
}

// The incremental derive cache agrees with a from-scratch fold after every
// burst of random appends and replaces, and views handed out earlier never
// change.
func TestIncrementalDeriveMatchesScratch(t *testing.T) {
	const logs, bursts = 60, 80
	r := rand.New(rand.NewSource(20260830))
	for run := range logs {
		m := &deriveModel{t: t, r: r, l: newTestLog(t)}
		var views []oldView
		for burst := range bursts {
			for range 1 + r.Intn(4) {
				m.mutate()
			}
			got := m.l.DeriveMessages()
			want := DeriveFromScratch(m.l.Events().Slice())
			require.Equalf(t, len(want), got.Len(), "run %d burst %d", run, burst)
			for i, w := range want {
				require.Truef(t, w.Equal(got.At(i)), "run %d burst %d message %d: want %s, got %s",
					run, burst, i, w.JSON(), got.At(i).JSON())
			}
			require.Equal(t, FoldSurface(m.l.Events().Slice()), m.l.SurfaceNodes())
			views = append(views, oldView{view: got, want: got.Slice()})
			requireViewsIntact(t, views[max(0, len(views)-4):])
		}
		requireViewsIntact(t, views)
		require.NoError(t, CheckTrace(m.l.Events().Slice()))
	}
}

func requireViewsIntact(t *testing.T, views []oldView) {
	t.Helper()
	for _, v := range views {
		require.Equal(t, len(v.want), v.view.Len())
		for i, w := range v.want {
			require.Truef(t, w.Equal(v.view.At(i)), "an old view changed at %d", i)
		}
	}
}
