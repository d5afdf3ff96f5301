package agent

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/fixtures"
	"github.com/dshgo/dsh/messages"
)

// The sections of the corpus's most common snapshot (acp/multi-turn and
// most other scenarios) and an approval policy another scenario records.
const (
	fullAccess = "Current DSH file policy: danger-full-access. The DSH file sandbox does not restrict file " +
		"modifications by available operations."
	approvalOff = "Approval prompts are disabled in this session: actions that require approval are rejected " +
		"automatically — do not request sandbox escalation (do not set `sandbox_permissions`)."
	approvalAsk = "Approval policy: ask. Operations that require approval may ask through the configured " +
		"answerers; without an available answerer, the request fails closed."
)

func mustContext(t *testing.T, sections ...ContextSection) RuntimeContext {
	t.Helper()
	rc, err := NewRuntimeContext(sections...)
	require.NoError(t, err)
	return rc
}

func policyContext(t *testing.T, approval string) RuntimeContext {
	return mustContext(t, ContextSection{Name: "sandbox:policy", Text: fullAccess},
		ContextSection{Name: "approval:policy", Text: approval})
}

func withRuntimeContext(rc RuntimeContext) option {
	return func(_ *harness, c *Config) { c.RuntimeContext = rc }
}

// snapshotTexts returns the texts of the snapshots in es, in log order.
func snapshotTexts(es []session.Event) []string {
	var out []string
	for _, e := range es {
		if text, ok := snapshotText(e); ok {
			out = append(out, text)
		}
	}
	return out
}

// Every snapshot the corpus records is reproduced byte for byte from its
// sections: the rendered text (the message's content) and the source.
func TestRuntimeContextRenderingMatchesCorpus(t *testing.T) {
	root, err := fixtures.CorpusDir()
	require.NoError(t, err)
	seen := 0
	err = filepath.WalkDir(root, func(path string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() || !strings.HasSuffix(path, ".jsonl") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for line := range strings.SplitSeq(string(data), "\n") {
			if !strings.Contains(line, `"form":"snapshot"`) {
				continue
			}
			j, err := messages.ParseJSONString(line)
			require.NoError(t, err, path)
			d, _ := j.Field("data")
			content, _ := d.Field("content")
			src, _ := d.Field("source")
			secs, _ := src.Field("sections")
			var in []ContextSection
			for s := range secs.Elements() {
				n, _ := s.Field("name")
				x, _ := s.Field("text")
				name, _ := n.AsString()
				text, _ := x.AsString()
				in = append(in, ContextSection{Name: name, Text: text})
			}
			m, err := mustContext(t, in...).snapshot()
			require.NoError(t, err)
			got, _ := m.JSON().Field("content")
			require.Equal(t, content.String(), got.String(), path)
			require.Equal(t, src.String(), m.Source().JSON().String(), path)
			seen++
		}
		return nil
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, seen, 50, "the corpus records a snapshot in most scenarios")
}

func TestNewRuntimeContext(t *testing.T) {
	_, err := NewRuntimeContext(ContextSection{Text: "x"})
	require.Error(t, err)
	_, err = NewRuntimeContext(ContextSection{Name: "a", Text: "x"}, ContextSection{Name: "a", Text: "y"})
	require.Error(t, err)
	in := []ContextSection{{Name: "a", Text: "x"}, {Name: "gone"}, {Name: "b", Text: "y"}}
	rc, err := NewRuntimeContext(in...)
	require.NoError(t, err)
	in[0].Text = "changed"
	require.Equal(t, []ContextSection{{Name: "a", Text: "x"}, {Name: "b", Text: "y"}}, rc.Sections(),
		"copied; a section without text is gone")
	require.Equal(t, runtimeContextPreamble+"\n\nx\n\ny", rc.text())
	require.Equal(t, runtimeContextNone, RuntimeContext{}.text())
	m, err := RuntimeContext{}.snapshot()
	require.NoError(t, err)
	require.Equal(t, `{"kind":"plugin","plugin":"@deepseek-ai/dsh-system-prompt","form":"snapshot","sections":[]}`,
		m.Source().JSON().String())
}

// The snapshot enters with the first turn's input (after the claimed
// message, before the request), is not sent again while the context is
// unchanged, is sent again when it changed, and, once every section is
// gone, the "none" text is sent once.
func TestRuntimeContextSnapshot(t *testing.T) {
	mock := newMock()
	h := newHarness(t, mock, nil, withRuntimeContext(policyContext(t, approvalOff)))
	h.followup("one")
	h.waitIdle()
	es := h.events()
	first := policyContext(t, approvalOff).text()
	require.Equal(t, []string{first}, snapshotTexts(es))
	require.Equal(t, []session.EventType{session.TypeStepStart, session.TypeUserMessage, session.TypeUserMessage,
		session.TypeRequestHeader}, types(es[3:7]))
	snap := es[5].Payload().(session.UserMessage).Message
	require.Equal(t, first, texts(snap))
	req := mock.Requests()[0]
	require.Equal(t, 2, req.NumMessages())
	require.Equal(t, "one", texts(req.Message(0)))
	require.True(t, req.Message(1).Equal(snap), "the request carries the snapshot")

	h.followup("two")
	h.waitIdle()
	require.Len(t, snapshotTexts(h.events()), 1, "unchanged: not sent again")

	h.sys.Root.Send(h.agent, SetRuntimeContext{Context: policyContext(t, approvalAsk)})
	h.followup("three")
	h.waitIdle()
	require.Equal(t, []string{first, policyContext(t, approvalAsk).text()}, snapshotTexts(h.events()), "changed")

	h.sys.Root.Send(h.agent, SetRuntimeContext{})
	h.followup("four")
	h.waitIdle()
	h.followup("five")
	h.waitIdle()
	es = h.events()
	got := snapshotTexts(es)
	require.Len(t, got, 3, "cleared: the none text once")
	require.Equal(t, runtimeContextNone, got[2])

	h.sys.Root.Send(h.agent, SetRuntimeContext{Context: policyContext(t, approvalOff)})
	h.followup("six")
	h.waitIdle()
	require.Equal(t, first, snapshotTexts(h.events())[3], "set again after the none text")
	requireBalanced(t, h.events())
}

// A resumed agent rebuilds the projection from the log: an unchanged
// context is not sent again, a changed one is; an agent without a
// runtime context sends nothing (the feature is off).
func TestRuntimeContextAfterResume(t *testing.T) {
	h := newHarness(t, newMock(), nil, withRuntimeContext(policyContext(t, approvalOff)))
	h.followup("one")
	h.waitIdle()
	es := h.events()
	require.Len(t, snapshotTexts(es), 1)

	cases := map[string]struct {
		rc   RuntimeContext
		want int
	}{
		"unchanged": {rc: policyContext(t, approvalOff), want: 1},
		"changed":   {rc: policyContext(t, approvalAsk), want: 2},
		"off":       {want: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			l, err := session.Restore(testHeader(), es)
			require.NoError(t, err)
			h2 := newHarness(t, newMock(), l, withRuntimeContext(tc.rc))
			h2.followup("again")
			h2.waitIdle()
			require.Len(t, snapshotTexts(h2.events()), tc.want)
		})
	}
}

// A replace that shadows the retained snapshot forgets it: the next step
// sends it again, and the request carries it after the checkpoint.
func TestRuntimeContextShadowedIsResent(t *testing.T) {
	mock := newMock()
	h := newHarness(t, mock, nil, withRuntimeContext(policyContext(t, approvalOff)),
		withCompaction(CompactionConfig{NewID: fixedIDs("cmp-rc")}))
	h.followup("hi")
	h.waitIdle()
	h.followup(longPremise)
	h.waitIdle()
	snapSeq := slices.IndexFunc(h.events(), func(e session.Event) bool { _, ok := snapshotText(e); return ok })
	h.refs++
	require.Equal(t, Compacted{Ref: h.refs, Outcome: CompactDone, CompactionID: "cmp-rc"}, h.ask(Compact{Ref: h.refs}))
	es := h.events()
	require.NotContains(t, session.FoldSurface(es), int64(snapSeq), "the checkpoint shadows the snapshot")
	require.Len(t, snapshotTexts(es), 1)

	h.followup("after")
	h.waitIdle()
	es = h.events()
	require.Len(t, snapshotTexts(es), 2, "sent again")
	reqs := mock.Requests()
	last := reqs[len(reqs)-1]
	require.Equal(t, "compact", last.Message(0).Source().Plugin())
	require.Equal(t, policyContext(t, approvalOff).text(), texts(last.Message(last.NumMessages()-1)))
	require.Equal(t, "after", texts(last.Message(last.NumMessages()-2)))

	h.followup("later")
	h.waitIdle()
	require.Len(t, snapshotTexts(h.events()), 2, "retained again: not sent")
}

// With a pre-step hook the snapshot is offered to it and appended to an
// entering decision, unless the decision already carries it.
func TestRuntimeContextWithPreStepHook(t *testing.T) {
	cases := map[string]func(in PreStepInput) PreStepDecision{
		"appended": func(in PreStepInput) PreStepDecision { return PreStepDecision{Messages: in.Messages} },
		"placed by the hook": func(in PreStepInput) PreStepDecision {
			return PreStepDecision{Messages: append([]messages.Message{in.Snapshot}, in.Messages...)}
		},
	}
	for name, decide := range cases {
		t.Run(name, func(t *testing.T) {
			offered := make(chan messages.Message, 4)
			h := newHarness(t, newMock(), nil, withRuntimeContext(policyContext(t, approvalOff)),
				withPreStep(preStepFunc(func(_ context.Context, in PreStepInput) (PreStepDecision, error) {
					offered <- in.Snapshot
					return decide(in), nil
				})))
			h.followup("one")
			h.waitIdle()
			require.Equal(t, policyContext(t, approvalOff).text(), texts(<-offered))
			es := h.events()
			require.Len(t, snapshotTexts(es), 1, "entered once")
			require.Len(t, ofType(es, session.TypeUserMessage), 2)
			h.followup("two")
			h.waitIdle()
			require.True(t, (<-offered).IsZero(), "unchanged: nothing offered")
		})
	}
}
