package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// writeTranscript prints a log for people: turns, steps, messages in the
// order they were appended (a replacement is shown where it happened, and
// never erases what was shown before, as the reference advises for human
// transcripts), tool calls and results, and one line per other event.
// Runs of stream chunks are summarised; the assembled message follows them.
// Control characters in the log's text are shown visibly (see visible.go).
func writeTranscript(w io.Writer, l *session.Log) error {
	p := &printer{w: w}
	h := l.Header()
	p.line(0, "session %s, created %s", h.ID, time.UnixMilli(h.CreatedAt).UTC().Format(time.RFC3339))
	if h.Cwd != "" {
		p.line(0, "cwd %s", h.Cwd)
	}
	if h.ParentSession != "" {
		p.line(0, "forked from %s (seed of %d events)", h.ParentSession, h.SeedLength.Or(0))
	}
	chunks := 0
	flushChunks := func() {
		if chunks > 0 {
			p.line(2, "… %d stream chunks", chunks)
			chunks = 0
		}
	}
	for e := range l.Events().All() {
		if e.Type() != session.TypeAssistantChunk {
			flushChunks()
		}
		switch pl := e.Payload().(type) {
		case session.TurnStart:
			p.line(0, "")
			p.line(0, "── turn %d (seq %d)", pl.Turn, e.Seq())
		case session.TurnEnd:
			p.line(0, "── turn %d ended: %s", pl.Turn, turnEndText(pl.Reason))
		case session.StepStart:
			p.line(1, "step %d", pl.Step)
		case session.StepEnd:
		case session.AssistantChunk:
			chunks++
		case session.UserMessage:
			p.message(e, pl.Message, "")
		case session.AssistantMessage:
			suffix := ""
			if pl.Interrupted {
				suffix = " (interrupted)"
			}
			p.message(e, pl.Message, suffix)
			if pl.HasUsage {
				p.line(3, "usage: %s", usageText(pl.Usage))
			}
		case session.ToolCall:
			p.line(2, "tool call %s %s %s", pl.CallID, pl.Name, oneLine(pl.Arguments, 200))
		case session.ToolResult:
			suffix := ""
			if pl.Error.Code != "" {
				suffix = " [" + pl.Error.Code + "]"
			}
			p.message(e, pl.Message, suffix)
		case session.RequestHeader:
			p.line(2, "· request header %s/%s (%s)", pl.Header.Config.Provider, pl.Header.Config.Model, pl.Reason)
		case session.RequestContext:
			p.line(2, "· request context %s/%s", pl.Provider, pl.Model)
		case session.InboxSpliced:
			p.line(1, "· inbox %s: +%d at %d, -%d%s", pl.Target, len(pl.Inserted()), pl.Start,
				pl.RemovedCount.Or(0), map[bool]string{true: " (" + pl.Outcome + ")", false: ""}[pl.Outcome != ""])
		case session.EndSeed:
			p.line(0, "── end of seed (seq %d)", e.Seq())
		case session.TodoWrite:
			p.line(2, "· todos:")
			for _, t := range pl.Todos() {
				p.line(3, "[%s] %s", t.Status, t.Content)
			}
		default:
			p.line(2, "· %s %s", e.Type(), oneLine(e.Data().String(), 120))
		}
	}
	flushChunks()
	return p.err
}

type printer struct {
	w   io.Writer
	err error
}

// line prints one line of the transcript. Every line goes through here,
// and its text is rendered with visibleLine: whatever the log holds, the
// terminal gets no control character but the newline that ends the line
// (and tabs).
func (p *printer) line(indent int, format string, args ...any) {
	if p.err != nil {
		return
	}
	_, p.err = fmt.Fprintf(p.w, "%s%s\n", strings.Repeat("  ", indent), visibleLine(fmt.Sprintf(format, args...)))
}

func (p *printer) message(e session.Event, m messages.Message, suffix string) {
	who := string(m.Role())
	src := m.Source()
	switch src.Kind() {
	case messages.SourceUser:
	case messages.SourceModel:
		who += " (" + src.Provider() + "/" + src.Model() + ")"
	case messages.SourceTool:
		who = "tool result " + src.CallID()
	case messages.SourcePlugin:
		who += " (plugin " + src.Plugin() + ")"
	default:
		who += " (" + string(src.Kind()) + ")"
	}
	if e.SurfaceOp().Kind() == session.OpReplace {
		s, end := e.SurfaceOp().Range()
		who += fmt.Sprintf(" replacing seqs %d..%d", s, end)
	}
	p.line(2, "%s%s:", who, suffix)
	p.blocks(3, m.Content())
}

func (p *printer) blocks(indent int, bs []messages.ContentBlock) {
	for _, b := range bs {
		switch b.Type() {
		case messages.BlockText:
			for l := range strings.SplitSeq(b.Text(), "\n") {
				p.line(indent, "%s", l)
			}
		case messages.BlockReasoning:
			p.line(indent, "thinking: %s", oneLine(b.Text(), 300))
		case messages.BlockToolCall:
			p.line(indent, "→ %s %s (%s)", b.Name(), oneLine(b.Arguments(), 200), b.ID())
		case messages.BlockToolResult:
			if b.IsError() {
				p.line(indent, "(error)")
			}
			p.blocks(indent, b.Content())
		case messages.BlockImage:
			p.line(indent, "[image]")
		default:
			p.line(indent, "[%s block]", b.Type())
		}
	}
}

func turnEndText(r session.TurnEndReason) string {
	switch r.Kind {
	case session.EndAborted:
		return "aborted (" + string(r.Cause.Kind) + ")"
	case session.EndError:
		return "error " + r.Error.Code + ": " + r.Error.Message
	}
	return string(r.Kind)
}

func usageText(u messages.TokenUsage) string {
	s := fmt.Sprintf("in %d, out %d", u.InputTokens, u.OutputTokens)
	if v, ok := u.CacheReadTokens.Get(); ok {
		s += fmt.Sprintf(", cache read %d", v)
	}
	if v, ok := u.CacheWriteTokens.Get(); ok {
		s += fmt.Sprintf(", cache write %d", v)
	}
	if v, ok := u.ReasoningTokens.Get(); ok {
		s += fmt.Sprintf(", reasoning %d", v)
	}
	return s
}

// oneLine flattens s to one line of at most max runes.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > max {
		return string(r[:max-1]) + "…"
	}
	return s
}
