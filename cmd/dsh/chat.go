package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/dshgo/dsh/actors/session"
)

const chatUsage = `Usage: dsh chat [flags]

An interactive session: each line you type is sent to the model (a
followup: while a turn runs it is queued as the next turn) and the answer
streams to stdout. Without --session a new session is created in the
store (--store, or --dir); --session ID resumes one. Line editing is the terminal's own (cooked mode:
backspace, Ctrl-U, Ctrl-W); there is no history or completion.

Commands:
  /steer TEXT    steer the running turn (or start one when idle)
  /inject TEXT   stage TEXT to ride along with the next message
  /cancel        cancel the running turn
  /wait          wait until the session is idle (handy in scripts)
  /fork [SEQ]    fork the session at event SEQ (default: its end) and go on in the fork
  /messages      print the derived (model-visible) messages as JSON lines
  /help          this list
  /quit          leave (a running turn is cancelled); end of input leaves once idle

A turn is reported ended (with --verbose, or when it did not complete)
only once its end is durable on disk. When writing it fails (a full disk),
the turn is reported as not durable yet, with the write error: it is
retried in the background, and no new turn starts until a retry succeeds
(messages sent meanwhile are refused with the error).

Ctrl-C cancels the running turn; when no turn runs it leaves. Either way
the session is flushed and its id printed on stderr. Exit 0, or 1 when the
session could not be opened or, at the end of input, is not durable; 2 on
bad usage.

Flags:
`

const chatHelp = `/steer TEXT · /inject TEXT · /cancel · /wait · /fork [SEQ] · /messages · /help · /quit`

// chatCmd is `dsh chat`.
func chatCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigc)
	return runChat(context.Background(), args, stdin, stdout, stderr, sigc, cmdTalkEnv)
}

// lockedWriter serialises writes from the streamer and the REPL.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// chat is the state of one REPL.
type chat struct {
	t            *talk
	s            *streamer
	f            talkFlags
	out, diag    io.Writer
	intr         <-chan os.Signal
	tty          bool
	rawOut, rawD io.Writer
}

// errQuit ends the REPL normally.
var errQuit = errors.New("quit")

// runChat is dsh chat; intr delivers Ctrl-C.
func runChat(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, intr <-chan os.Signal, env talkEnv) (err error) {
	fs := newFlagSet("chat")
	var f talkFlags
	f.register(fs, false)
	if err := parseFlags(fs, args, chatUsage, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("chat: unexpected argument %q (type messages at the prompt)", fs.Arg(0))
	}
	var mu sync.Mutex
	c := &chat{f: f, intr: intr, out: lockedWriter{&mu, stdout}, diag: lockedWriter{&mu, stderr},
		tty: isTerminal(stdin), rawOut: stdout, rawD: stderr}
	env.stderr = c.diag
	o, err := f.obs.open(ctx, stderr, &mu, false /* prometheus */, true /* hold */)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := o.close(err); cerr != nil && err == nil {
			err = cerr
		}
	}()
	t, err := startTalk(ctx, f, env, o)
	if err != nil {
		return err
	}
	c.t = t
	defer func() {
		if c.s != nil {
			c.t.confirmEnds(context.Background(), c.s)
			c.s.stop()
		}
		if cerr := t.close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing: %w", cerr)
		}
		fmt.Fprintf(c.diag, "session %s\n", c.t.id)
	}()
	if err := c.follow(ctx); err != nil {
		return err
	}
	c.note("session %s under %s; %s", t.id, t.dir, chatHelp)

	lines := make(chan string)
	quit := make(chan struct{})
	defer close(quit)
	var readErr error // set before lines is closed
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 64<<10), maxChatLine)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-quit:
				return
			}
		}
		readErr = sc.Err()
		if errors.Is(readErr, bufio.ErrTooLong) {
			readErr = fmt.Errorf("an input line is longer than %d MiB", maxChatLine>>20)
		}
	}()
	c.prompt()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				// End of input: leave once idle. Input that could not be
				// read is an error, not an end.
				if err := c.wait(ctx); err != nil {
					return err
				}
				if readErr != nil {
					return fmt.Errorf("chat: reading input: %w", readErr)
				}
				return nil
			}
			if err := c.handle(ctx, line); err != nil {
				if errors.Is(err, errQuit) {
					return nil
				}
				return err
			}
			c.prompt()
		case <-intr:
			if !c.s.isRunning() {
				return nil
			}
			c.note("cancelling the turn (Ctrl-C)")
			if err := c.t.be.Cancel(ctx, c.t.id, session.CancelCause{Kind: session.CauseUser}); err != nil {
				return err
			}
		case <-c.s.ended:
			c.t.confirmEnds(ctx, c.s)
			c.prompt()
		}
	}
}

// follow subscribes to the current session.
func (c *chat) follow(ctx context.Context) error {
	s, err := c.t.subscribe(ctx, c.out, c.diag, c.f)
	if err != nil {
		return err
	}
	s.noticeEnds = true
	s.dim = dimmed(c.rawD)
	c.s = s
	return nil
}

func (c *chat) note(format string, args ...any) {
	msg := visibleLine(fmt.Sprintf(format, args...))
	if dimmed(c.rawD) {
		msg = dimOn + msg + dimOff
	}
	fmt.Fprintln(c.diag, msg)
}

func (c *chat) prompt() {
	if c.tty && !c.s.isRunning() {
		fmt.Fprint(c.diag, "> ")
	}
}

// wait waits until the session is idle; Ctrl-C cancels the running turn
// and goes on waiting.
func (c *chat) wait(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- c.t.waitIdle(ctx, c.s) }()
	for {
		select {
		case err := <-done:
			return err
		case <-c.intr:
			c.note("cancelling the turn (Ctrl-C)")
			if err := c.t.be.Cancel(ctx, c.t.id, session.CancelCause{Kind: session.CauseUser}); err != nil {
				return err
			}
		}
	}
}

// handle runs one input line. Command failures are reported and the REPL
// goes on; only errQuit and a closed host end it.
func (c *chat) handle(ctx context.Context, line string) error {
	text := strings.TrimSpace(line)
	if text == "" {
		return nil
	}
	if !strings.HasPrefix(text, "/") {
		return c.report(c.send(ctx, "followup", text))
	}
	cmd, arg, _ := strings.Cut(text, " ")
	arg = strings.TrimSpace(arg)
	switch cmd {
	case "/quit", "/exit":
		if c.s.isRunning() {
			if err := c.t.cancelAndWait(c.s); err != nil {
				return err
			}
		}
		return errQuit
	case "/help":
		fmt.Fprint(c.diag, chatHelp+"\n")
	case "/steer", "/inject":
		if arg == "" {
			c.note("usage: %s TEXT", cmd)
			return nil
		}
		return c.report(c.send(ctx, cmd[1:], arg))
	case "/cancel":
		return c.report(c.t.be.Cancel(ctx, c.t.id, session.CancelCause{Kind: session.CauseUser}))
	case "/wait":
		return c.report(c.wait(ctx))
	case "/messages":
		ms, err := c.t.be.Messages(ctx, c.t.id)
		if err != nil {
			return c.report(err)
		}
		for _, m := range ms {
			fmt.Fprintln(c.out, visibleJSON(m.JSON().String()))
		}
	case "/fork":
		at := session.LastEvent
		if arg != "" {
			n, err := strconv.ParseInt(arg, 10, 64)
			if err != nil || n < 0 {
				c.note("usage: /fork [SEQ] (SEQ: an event number, 0 or more)")
				return nil
			}
			at = n
		}
		child, err := c.t.be.Fork(ctx, c.t.id, at)
		if err != nil {
			return c.report(err)
		}
		parent := c.t.id
		c.t.confirmEnds(ctx, c.s)
		c.s.stop()
		c.t.id = child
		if err := c.follow(ctx); err != nil {
			return err
		}
		where := "its end"
		if at >= 0 {
			where = "event " + strconv.FormatInt(at, 10)
		}
		c.note("forked %s at %s: now in %s", parent, where, child)
	default:
		c.note("unknown command %s (%s)", cmd, chatHelp)
	}
	return nil
}

func (c *chat) send(ctx context.Context, kind, text string) error {
	m, err := userMessage(text)
	if err != nil {
		return err
	}
	switch kind {
	case "steer":
		return c.t.be.Steer(ctx, c.t.id, m)
	case "inject":
		return c.t.be.Inject(ctx, c.t.id, m)
	}
	return c.t.be.Followup(ctx, c.t.id, m)
}

// maxChatLine bounds one line of chat input: a longer one ends the chat
// with an error (the reader cannot go on past it).
const maxChatLine = 16 << 20

// report prints a command's failure as one line and goes on, unless the
// host is gone.
func (c *chat) report(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	c.note("dsh: %v", err)
	return nil
}
