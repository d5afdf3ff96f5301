package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/llm/deepseek"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/supervisor"
)

// streamer prints a session's events as they commit: text deltas to out,
// reasoning (when asked) and notices to diag.
type streamer struct {
	c             <-chan session.Event
	sub           supervisor.Subscription
	out, diag     io.Writer
	showReasoning bool
	verbose       bool // tool calls and turn ends on diag
	dim           bool // diag is a terminal
	quietText     bool // --json: collect, do not print
	noticeEnds    bool // print turns that did not complete on diag, and turn ends not durable

	mu       sync.Mutex
	seen     int64
	changed  chan struct{} // closed and replaced on every batch
	done     chan struct{} // closed when the subscription ends
	ended    chan struct{} // gets a token when a turn ends (never blocks)
	running  bool
	text     strings.Builder
	lastText byte // last text byte printed in the current step (0: none)
	usage    messages.TokenUsage
	ends     []session.TurnEnd
	// pending are the turn ends seen and not reported yet: a turn is
	// reported ended only once its end is durable (reportEnds). The first
	// warned of them were reported as not durable already.
	pending []session.TurnEnd
	warned  int
}

func newStreamer(c <-chan session.Event, sub supervisor.Subscription, from int64, out, diag io.Writer) *streamer {
	s := &streamer{c: c, sub: sub, out: out, diag: diag, seen: from - 1, changed: make(chan struct{}), done: make(chan struct{}),
		ended: make(chan struct{}, 1)}
	return s
}

func (s *streamer) start() { go s.loop() }

func (s *streamer) loop() {
	defer close(s.done)
	for ev := range s.c {
		s.mu.Lock()
		s.handle(ev)
		s.seen = ev.Seq()
		if len(s.c) == 0 {
			close(s.changed)
			s.changed = make(chan struct{})
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

const (
	dimOn  = "\x1b[2m"
	dimOff = "\x1b[0m"
)

// note prints a notice on diag, on one line: its text (a tool's name and
// arguments, a provider's error message) is rendered visibly.
func (s *streamer) note(format string, args ...any) {
	msg := visibleLine(fmt.Sprintf(format, args...))
	if s.dim {
		msg = dimOn + msg + dimOff
	}
	fmt.Fprintln(s.diag, msg)
}

// endLine ends a partial line of text before a notice.
func (s *streamer) endLine() {
	if s.lastText != 0 && s.lastText != '\n' && !s.quietText {
		fmt.Fprintln(s.out)
		s.lastText = '\n'
	}
}

func (s *streamer) handle(ev session.Event) {
	switch p := ev.Payload().(type) {
	case session.TurnStart:
		s.running = true
		s.lastText = 0
	case session.StepStart:
		if s.lastText != 0 && s.lastText != '\n' {
			s.text.WriteByte('\n')
			if !s.quietText {
				fmt.Fprintln(s.out)
			}
		}
		s.lastText = 0
	case session.AssistantChunk:
		switch p.Chunk.Type() {
		case messages.ChunkTextDelta:
			t := p.Chunk.Text()
			if t == "" {
				return
			}
			s.text.WriteString(t)
			s.lastText = t[len(t)-1]
			if !s.quietText {
				// The model's text is untrusted: no raw escapes to the terminal.
				io.WriteString(s.out, visibleText(t))
			}
		case messages.ChunkReasoningDelta:
			if s.showReasoning {
				t := visibleText(p.Chunk.Text())
				if s.dim {
					t = dimOn + t + dimOff
				}
				io.WriteString(s.diag, t)
			}
		}
	case session.AssistantMessage:
		if p.HasUsage {
			s.usage = sumUsage(s.usage, p.Usage)
		}
		if s.showReasoning {
			fmt.Fprintln(s.diag)
		}
	case session.ToolCall:
		if s.verbose {
			s.endLine()
			s.note("[tool %s %s]", p.Name, p.Arguments)
		}
	case session.ToolResult:
		if s.verbose && p.Error.Code != "" {
			s.note("[tool %s failed: %s]", p.Message.ID(), p.Error.Code)
		}
	case session.TurnEnd:
		s.running = false
		s.ends = append(s.ends, p)
		s.pending = append(s.pending, p)
		s.endLine()
		s.lastText = 0
		select {
		case s.ended <- struct{}{}:
		default:
		}
	}
}

// waitSeen waits until the streamer has handled seq.
func (s *streamer) waitSeen(ctx context.Context, seq int64) error {
	for {
		s.mu.Lock()
		seen, ch := s.seen, s.changed
		s.mu.Unlock()
		if seen >= seq {
			return nil
		}
		select {
		case <-ch:
		case <-s.done:
			s.mu.Lock()
			seen = s.seen
			s.mu.Unlock()
			if seen >= seq {
				return nil
			}
			if err := s.sub.Err(); err != nil {
				return err
			}
			return errors.New("event stream ended early")
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// hasPendingEnds reports whether turn ends wait to be reported.
func (s *streamer) hasPendingEnds() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending) > 0
}

// reportEnds reports the pending turn ends, given the outcome of a flush
// (or WaitIdle) that followed them. durable == nil: they are durable, and
// each is noted ("[turn N completed]" with --verbose, an
// end other than completed with noticeEnds; an end reported before as
// not durable is noted as durable now). Otherwise, with noticeEnds (dsh
// chat), each is noted once as not durable yet, with the write error,
// and stays pending until a later flush succeeds; without (dsh run, which
// returns the error), nothing is printed.
func (s *streamer) reportEnds(durable error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return
	}
	if durable != nil {
		if s.noticeEnds {
			for _, p := range s.pending[s.warned:] {
				s.note("[turn %d's end (%s) is not durable yet: %v; it is retried in the background]",
					p.Turn, describeEnd(p.Reason), durable)
			}
			s.warned = len(s.pending)
		}
		return
	}
	for i, p := range s.pending {
		switch {
		case i < s.warned:
			s.note("[turn %d %s; its end is durable now]", p.Turn, describeEnd(p.Reason))
		case s.verbose || (s.noticeEnds && p.Reason.Kind != session.EndCompleted):
			s.note("[turn %d %s]", p.Turn, describeEnd(p.Reason))
		}
	}
	s.pending, s.warned = s.pending[:0], 0
}

// isRunning reports whether a turn is open.
func (s *streamer) isRunning() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running
}

// stop ends the subscription and waits for the loop.
func (s *streamer) stop() {
	s.sub.Close()
	<-s.done
}

func sumUsage(a, b messages.TokenUsage) messages.TokenUsage {
	opt := func(x, y messages.OptInt) messages.OptInt {
		xv, xok := x.Get()
		yv, yok := y.Get()
		if !xok && !yok {
			return messages.OptInt{}
		}
		return messages.Some(xv + yv)
	}
	return messages.TokenUsage{InputTokens: a.InputTokens + b.InputTokens, OutputTokens: a.OutputTokens + b.OutputTokens,
		CacheReadTokens: opt(a.CacheReadTokens, b.CacheReadTokens), CacheWriteTokens: opt(a.CacheWriteTokens, b.CacheWriteTokens),
		ReasoningTokens: opt(a.ReasoningTokens, b.ReasoningTokens)}
}

// notDurable is dsh run's error when WaitIdle failed: when the turn ended
// it is the write error of its end (the turn is not reported ended: after
// a crash it would be gone), else err as it is.
func notDurable(s *streamer, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.ends); n > 0 {
		return fmt.Errorf("run: turn %d's end could not be written: %w", s.ends[n-1].Turn, err)
	}
	return err
}

// describeEnd renders a turn-end reason in a few words.
func describeEnd(r session.TurnEndReason) string {
	switch r.Kind {
	case session.EndAborted:
		if r.Cause.Kind == session.CauseUser {
			return "cancelled"
		}
		return "aborted (" + string(r.Cause.Kind) + ")"
	case session.EndError:
		return "failed: " + describeFailure(r.Error)
	}
	return string(r.Kind)
}

func describeFailure(f messages.LlmFailure) string {
	msg := strings.Join(strings.Fields(f.Message), " ")
	switch f.Code {
	case llm.CodeAuth:
		return "authentication failed (check " + deepseek.APIKeyEnv + "): " + msg
	case "":
		return msg
	}
	return f.Code + ": " + msg
}
