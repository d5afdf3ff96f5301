package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// The runtime-context snapshot (docs/agent-loop.md#runtime-context). Dynamic
// prompt sections (the sandbox and approval policy, and so on) are not put in
// the system prompt, whose change would be a request/header {change} and
// would invalidate the provider's prompt cache from the top: they travel as a
// plugin-sourced user/message at the tail of the history, entered with a
// step's input only when its text differs from the last snapshot still on the
// surface.

// runtimeContextPlugin is the plugin of a snapshot's source (the
// reference's system-prompt plugin).
const runtimeContextPlugin = "@deepseek-ai/dsh-system-prompt"

// runtimeContextPreamble opens a snapshot's text; the sections' texts
// follow, each after a blank line.
const runtimeContextPreamble = "Current runtime context. This snapshot supersedes earlier runtime-context snapshots."

// runtimeContextNone is the text sent, once, when every section is gone
// while an earlier snapshot is still on the surface.
const runtimeContextNone = "Current runtime context: none. Earlier runtime-context snapshots no longer apply."

// ContextSection is one named section of the runtime context: Name
// identifies it ("sandbox:policy", "approval:policy"), Text is what the
// model reads.
type ContextSection struct {
	Name, Text string
}

// RuntimeContext is an immutable, ordered list of context sections with
// distinct names. The zero value has no section. Safe for concurrent use.
type RuntimeContext struct {
	sections []ContextSection // never written after construction
}

// NewRuntimeContext returns the context of sections, in the order given.
// A section with an empty text is left out (it is gone); an empty name or
// a name given twice is an error. The slice is copied: the caller keeps
// ownership of it.
func NewRuntimeContext(sections ...ContextSection) (RuntimeContext, error) {
	var out []ContextSection
	seen := make(map[string]bool, len(sections))
	for _, s := range sections {
		switch {
		case s.Name == "":
			return RuntimeContext{}, errors.New("agent: runtime-context section without a name")
		case seen[s.Name]:
			return RuntimeContext{}, fmt.Errorf("agent: runtime-context section %q given twice", s.Name)
		}
		seen[s.Name] = true
		if s.Text != "" {
			out = append(out, s)
		}
	}
	return RuntimeContext{sections: out}, nil
}

// Len returns the number of sections.
func (rc RuntimeContext) Len() int { return len(rc.sections) }

// Sections returns a copy of the sections, owned by the caller.
func (rc RuntimeContext) Sections() []ContextSection { return slices.Clone(rc.sections) }

// text renders the context as a snapshot's text: a preamble saying that
// it supersedes earlier snapshots and each section's text, separated by
// blank lines (the reference's rendering, byte for byte); when there is
// no section, a text saying that no runtime context applies any more.
func (rc RuntimeContext) text() string {
	if len(rc.sections) == 0 {
		return runtimeContextNone
	}
	var b strings.Builder
	b.WriteString(runtimeContextPreamble)
	for _, s := range rc.sections {
		b.WriteString("\n\n")
		b.WriteString(s.Text)
	}
	return b.String()
}

// snapshot returns the snapshot message of the context (a fresh id): one
// text block, source {kind:plugin, plugin:@deepseek-ai/dsh-system-prompt,
// form:snapshot, sections:[{name, text}...]}.
func (rc RuntimeContext) snapshot() (messages.Message, error) {
	secs := make([]messages.JSON, len(rc.sections))
	for i, s := range rc.sections {
		var o messages.ObjectBuilder
		secs[i] = o.String("name", s.Name).String("text", s.Text).Build()
	}
	var extra messages.ObjectBuilder
	extra.String("form", "snapshot").Raw("sections", messages.ArrayOf(secs...))
	src, err := messages.PluginSource(runtimeContextPlugin, extra.Build())
	if err != nil {
		return messages.Message{}, err
	}
	return messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(rc.text())}, src)
}

// snapshotText reports whether e is a runtime-context snapshot (a
// user/message whose source is the plugin's, form snapshot) and returns
// its text.
func snapshotText(e session.Event) (string, bool) {
	if e.Type() != session.TypeUserMessage {
		return "", false
	}
	p, ok := e.Payload().(session.UserMessage)
	if !ok {
		return "", false
	}
	src := p.Message.Source()
	if src.Kind() != messages.SourcePlugin || src.Plugin() != runtimeContextPlugin {
		return "", false
	}
	if f, ok := src.Field("form"); !ok {
		return "", false
	} else if form, _ := f.AsString(); form != "snapshot" {
		return "", false
	}
	var b strings.Builder
	for blk := range p.Message.Blocks() {
		b.WriteString(blk.Text())
	}
	return b.String(), true
}

// snapshotState is the projection of the last snapshot still on the
// surface: rebuilt from the log the first time it is needed, then
// following the committed events. Until the agent is given a runtime
// context it is never built (no cost when the feature is off).
type snapshotState struct {
	known bool   // built
	seq   int64  // the retained snapshot's seq; -1 for none
	text  string // its text
}

// onSetRuntimeContext replaces the runtime context from the next pre-step
// on, and turns the snapshot on (even for an empty context: clearing the
// sections then sends runtimeContextNone once, if a snapshot is on the
// surface).
func (d *driver) onSetRuntimeContext(rc RuntimeContext) {
	d.rc, d.rcOn = rc, true
}

// RuntimeContext returns the runtime context the next pre-step uses.
func (d *driver) RuntimeContext() RuntimeContext { return d.rc }

// retainedSnapshot returns the seq and text of the last snapshot still on
// the surface (seq -1 for none), building the projection from the log the
// first time.
func (d *driver) retainedSnapshot() (int64, string) {
	if !d.snap.known {
		d.snap = snapshotState{known: true, seq: -1}
		for seq := d.mirror.Len() - 1; seq >= 0; seq-- {
			e, _ := d.mirror.Event(seq)
			if text, ok := snapshotText(e); ok {
				// The last snapshot recorded is the retained one, unless a
				// replace has shadowed it since (a shadowed node never
				// comes back, so the surface today tells).
				if slices.Contains(d.mirror.SurfaceNodes(), seq) {
					d.snap.seq, d.snap.text = seq, text
				}
				break
			}
		}
	}
	return d.snap.seq, d.snap.text
}

// followSnapshot updates the projection with a committed event: a
// snapshot is the retained one; a replace that shadows the retained one
// forgets it (the reference does not fall back on an earlier one), so that
// the context is sent again.
func (d *driver) followSnapshot(e session.Event) {
	if !d.snap.known {
		return
	}
	if text, ok := snapshotText(e); ok {
		d.snap.seq, d.snap.text = e.Seq(), text
		return
	}
	if d.snap.seq >= 0 && e.SurfaceOp().Kind() == session.OpReplace &&
		!slices.Contains(d.mirror.SurfaceNodes(), d.snap.seq) {
		d.snap.seq, d.snap.text = -1, ""
	}
}

// withSnapshot is the pre-step hook's decision with the snapshot snap
// entered last, as the reference's default decision has it (claimed +
// [snapshot]): unless the decision rejects, already carries it (by id:
// a hook that wants it elsewhere in the batch puts it there itself), or
// enters nothing and no step would open without it (stepOpens false).
func withSnapshot(dec PreStepDecision, snap messages.Message, stepOpens bool) PreStepDecision {
	if snap.IsZero() || dec.Reject {
		return dec
	}
	has, entered := false, stepOpens
	for _, m := range dec.Messages {
		has = has || m.ID() == snap.ID()
		entered = true
	}
	for _, e := range dec.Entries {
		if !e.Message.IsZero() {
			has = has || e.Message.ID() == snap.ID()
			entered = true
		}
	}
	if has || !entered {
		return dec
	}
	dec.Entries = append(slices.Clip(dec.Entries), MessageEntry(snap))
	return dec
}

// snapshotCandidate returns the snapshot to enter with the step about to
// open, if any: none while the feature is off; the context's snapshot
// when its text differs from the retained one's; runtimeContextNone when
// the context is empty and a snapshot other than that is retained.
func (d *driver) snapshotCandidate() (messages.Message, bool) {
	if !d.rcOn {
		return messages.Message{}, false
	}
	seq, retained := d.retainedSnapshot()
	text := d.rc.text()
	if seq < 0 && d.rc.Len() == 0 || seq >= 0 && text == retained {
		return messages.Message{}, false
	}
	m, err := d.rc.snapshot()
	if err != nil {
		return messages.Message{}, false
	}
	return m, true
}
