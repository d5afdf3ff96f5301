package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/actors/agent/fstools"
	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/cluster"
	"github.com/dshgo/dsh/internal/storefs"
	"github.com/dshgo/dsh/internal/vfs"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/supervisor"
)

const runUsage = `Usage: dsh run [flags] PROMPT

Sends PROMPT to a session and streams the assistant's text to stdout until
the session is idle; the session id goes to stderr at the end. Without
--session a new session is created in the store (--store, or --dir);
--session ID resumes one.
The model may use the built-in tools: todo_write, and the read-only file
tools read_file, list_dir, glob and grep, confined to --workdir.

With --peers the session lives on a cluster of "dsh member" processes:
dsh run joins it as a client (hosting nothing), creates the session there
(or names one with --session) and streams the turn from whichever member
runs it. Members run with TLS take --tls-cert, --tls-key and --tls-ca
here too (a certificate their CA signed).

Exit status: 0 when the turn completed and its end is durable on disk, 1
when it ended in error (the failure is printed as one line on stderr),
was interrupted, or its end could not be written (the write error is
printed; the turn is not reported completed), 2 on bad usage. Ctrl-C
cancels the running turn (cause user), flushes the session and exits 1,
not 130: every dsh command has one failure status, 1.

Flags:
`

// talkFlags are the flags shared by run and chat.
type talkFlags struct {
	modelFlags
	sessionID, system      string
	stores                 storeFlags
	workdir                string
	showReasoning, verbose bool
	asJSON                 bool
	peers                  string   // run on a cluster (dsh member processes)
	tls                    tlsFlags // with --peers: mutual TLS with the members
	obs                    obsFlags
}

func (f *talkFlags) register(fs *flag.FlagSet, withJSON bool) {
	f.modelFlags.register(fs)
	f.stores.register(fs, "data directory holding the sessions (default $XDG_DATA_HOME/dsh, else ~/.local/share/dsh); --store jsonl:DIR")
	fs.StringVar(&f.sessionID, "session", "", "resume this session instead of creating one")
	fs.StringVar(&f.system, "system", "", "system prompt")
	fs.StringVar(&f.workdir, "workdir", "", "directory the file tools may read (default: the current directory)")
	fs.BoolVar(&f.showReasoning, "show-reasoning", false, "print the model's reasoning on stderr")
	fs.BoolVar(&f.verbose, "verbose", false, "print tool calls and turn ends on stderr")
	fs.StringVar(&f.peers, "peers", "", "run on a cluster: the provider endpoints (host:port, comma-separated) of its members; the session lives there (--dir, --provider, --workdir and --system are the members')")
	f.tls.register(fs, "with --peers: ")
	f.obs.register(fs, "warn")
	f.obs.registerActorMetrics(fs)
	if withJSON {
		fs.BoolVar(&f.asJSON, "json", false, "print one JSON value at the end instead of streaming the text")
	}
}

// talkEnv lets tests replace the model and the file system.
type talkEnv struct {
	provider llm.Provider
	// fs, when set, is the file system the sessions are written through
	// (a test's, with injected errors); nil: the OS's.
	fs vfs.FS
	// stderr receives the live trace export's errors (traces.go); nil:
	// discarded.
	stderr io.Writer
}

// cmdTalkEnv is the talkEnv of `dsh run` and `dsh chat` as commands: the
// zero value, except in tests that run the commands through run().
var cmdTalkEnv talkEnv

// talk is an open host (or a cluster client) with one current session.
type talk struct {
	h      *supervisor.Host    // nil on a cluster (dsh run --peers)
	be     supervisor.Sessions // h, or a cluster client
	tools  *fstools.Set        // nil on a cluster
	id     session.SessionID
	dir    string
	traces traceExport // off on a cluster: its members export
	obs    *obs
}

// logged is the number of events the current session has logged.
func (t *talk) logged(ctx context.Context) (int64, error) {
	st, err := t.be.Stats(ctx, t.id)
	return st.Events, err
}

// openTalk opens the host and creates or resumes the session.
func openTalk(ctx context.Context, f talkFlags, env talkEnv, o *obs) (*talk, error) {
	prov, model := env.provider, f.model
	if prov == nil {
		var err error
		if prov, model, err = f.modelFlags.open(""); err != nil {
			return nil, err
		}
	}
	loc, err := f.stores.location("--store")
	if err != nil {
		return nil, err
	}
	wd := f.workdir
	if wd == "" {
		d, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		wd = d
	}
	fst, err := fstools.New(wd)
	if err != nil {
		return nil, fmt.Errorf("--workdir: %w", err)
	}
	reg, err := agent.NewRegistry(append(fst.Tools(), agent.TodoWriteTool{})...)
	if err != nil {
		_ = fst.Close()
		return nil, err
	}
	st, err := openTalkStore(loc, env.fs)
	if err != nil {
		_ = fst.Close()
		return nil, err
	}
	stderr := env.stderr
	if stderr == nil {
		stderr = io.Discard
	}
	tr, err := openTraces(ctx, stderr)
	if err != nil {
		_ = st.Close()
		_ = fst.Close()
		return nil, err
	}
	tr.countDropped(o)
	h, err := supervisor.Open(supervisor.Config{Store: st, Provider: prov, Model: model, Tools: reg,
		SystemPrompt: f.system, Policy: persister.PolicyTurnEnd, Observers: tr.observers(),
		Logger: o.logger, MeterProvider: o.meterProvider(), System: o.system()})
	if err != nil {
		tr.close()
		_ = st.Close()
		_ = fst.Close()
		return nil, err
	}
	t := &talk{h: h, be: h, tools: fst, dir: loc.Path, traces: tr, obs: o}
	if loc.Scheme != persister.SchemeJSONL {
		t.dir = loc.String()
	}
	if f.sessionID != "" {
		t.id = session.SessionID(f.sessionID)
		if err := h.Resume(ctx, t.id); err != nil {
			t.close()
			if errors.Is(err, supervisor.ErrNoSession) {
				return nil, fmt.Errorf("no session %s under %s", f.sessionID, t.dir)
			}
			return nil, err
		}
	} else {
		id, err := h.Create(ctx, supervisor.CreateOptions{Cwd: fst.Dir()})
		if err != nil {
			t.close()
			return nil, err
		}
		t.id = id
	}
	return t, nil
}

// openTalkStore opens the store at loc for writing (persister.Open: with
// its writer locks), a JSONL directory through fsys when it is set. A
// JSONL directory is made first if missing, private (0700) as the
// directories the store makes in it are.
func openTalkStore(loc persister.Location, fsys vfs.FS) (persister.Store, error) {
	if loc.Scheme != persister.SchemeJSONL {
		return persister.Open(loc.String())
	}
	if err := os.MkdirAll(loc.Path, 0o700); err != nil {
		return nil, err
	}
	if fsys != nil {
		return storefs.NewJSONLStore(persister.JSONLConfig{Root: loc.Path, Lock: true}, fsys)
	}
	return persister.Open(loc.String())
}

// startTalk opens the local host, or joins the cluster of --peers.
func startTalk(ctx context.Context, f talkFlags, env talkEnv, o *obs) (*talk, error) {
	if f.peers != "" {
		if f.stores.store != "" {
			return nil, usagef("--store goes without --peers (the session lives in the members' store)")
		}
		return dialTalk(ctx, f, f.peers)
	}
	if f.tls.given() {
		return nil, usagef("--tls-cert, --tls-key and --tls-ca go with --peers")
	}
	return openTalk(ctx, f, env, o)
}

// dialTalk joins a cluster as a client and creates or names the
// session there.
func dialTalk(ctx context.Context, f talkFlags, peers string) (*talk, error) {
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tc, err := f.tls.load()
	if err != nil {
		return nil, err
	}
	cl, err := cluster.Dial(dctx, cluster.ClientConfig{Peers: splitPeers(peers), TLS: tc})
	if err != nil {
		return nil, err
	}
	t := &talk{be: cl, dir: peers}
	if f.sessionID != "" {
		t.id = session.SessionID(f.sessionID)
		if _, err := t.logged(ctx); err != nil {
			_ = cl.Close()
			return nil, err
		}
		return t, nil
	}
	id, err := cl.Create(ctx, supervisor.CreateOptions{})
	if err != nil {
		_ = cl.Close()
		return nil, err
	}
	t.id = id
	return t, nil
}

// close flushes and stops everything (bounded, whatever the caller's
// context).
func (t *talk) close() error {
	if cb, ok := t.be.(*cluster.Client); ok {
		return cb.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := t.h.Close(ctx)
	t.traces.close()
	_ = t.tools.Close()
	return err
}

// waitIdle waits for the session to be idle and durable, then for the
// streamer to have seen everything it logged, and reports the turn ends
// it saw: as ended when WaitIdle succeeded (everything is durable), else
// as not durable (see streamer.reportEnds).
func (t *talk) waitIdle(ctx context.Context, s *streamer) error {
	werr := t.be.WaitIdle(ctx, t.id)
	if t.obs != nil {
		// The turn is over: the warnings held meanwhile are printed, but
		// the one of the error about to be shown (werr).
		t.obs.release(werr)
	}
	if werr == nil || ctx.Err() == nil {
		// Idle either way (a failed flush fails after the agent is idle):
		// let the streamer catch up, so that the ends reported are all.
		n, err := t.logged(ctx)
		if err == nil {
			err = s.waitSeen(ctx, n-1)
		}
		if werr == nil && err != nil {
			return err
		}
	}
	s.reportEnds(werr)
	return werr
}

// confirmEnds reports the turn ends the streamer saw once they are
// durable: a flush of everything logged (it answers at once when the
// turn-end barrier is done already, and waits for it when it is in
// flight); when the flush fails, they are reported as not durable.
func (t *talk) confirmEnds(ctx context.Context, s *streamer) {
	if !s.hasPendingEnds() {
		return
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := t.be.Flush(fctx, t.id)
	s.reportEnds(err)
}

// cancelAndWait cancels the running turn (cause user) and waits, bounded,
// for the session to settle.
func (t *talk) cancelAndWait(s *streamer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := t.be.Cancel(ctx, t.id, session.CancelCause{Kind: session.CauseUser}); err != nil {
		return err
	}
	return t.waitIdle(ctx, s)
}

// userMessage builds a user message from text.
func userMessage(text string) (messages.Message, error) {
	return messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(text)}, messages.UserSource())
}

// subscribe starts a streamer on the current session from its end.
func (t *talk) subscribe(ctx context.Context, out, diag io.Writer, f talkFlags) (*streamer, error) {
	n, err := t.logged(ctx)
	if err != nil {
		return nil, err
	}
	sub, err := t.be.Subscribe(ctx, t.id, n)
	if err != nil {
		return nil, err
	}
	s := newStreamer(sub.Events(), sub, n, out, diag)
	s.showReasoning, s.verbose, s.dim, s.quietText = f.showReasoning, f.verbose, dimmed(diag), f.asJSON
	s.start()
	return s, nil
}

// runCmd is `dsh run`.
func runCmd(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runRun(ctx, args, stdout, stderr, cmdTalkEnv)
}

// runResult is the --json output of dsh run.
type runResult struct {
	Session string        `json:"session"`
	End     string        `json:"end"`
	Error   *runFailure   `json:"error,omitempty"`
	Cause   string        `json:"cause,omitempty"`
	Text    string        `json:"text"`
	Usage   runUsageStats `json:"usage"`
}

type runFailure struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Status  int    `json:"status,omitempty"`
}

type runUsageStats struct {
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	ReasoningTokens  int64 `json:"reasoning_tokens,omitempty"`
	CacheReadTokens  int64 `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
}

// runRun is dsh run; ctx is cancelled on Ctrl-C.
func runRun(ctx context.Context, args []string, stdout, stderr io.Writer, env talkEnv) (err error) {
	fs := newFlagSet("run")
	var f talkFlags
	f.register(fs, true)
	if err := parseFlags(fs, args, runUsage, stdout); err != nil {
		return err
	}
	if fs.NArg() != 1 || strings.TrimSpace(fs.Arg(0)) == "" {
		return usagef("run: want exactly one PROMPT argument (flags go before it)")
	}
	msg, err := userMessage(fs.Arg(0))
	if err != nil {
		return err
	}
	env.stderr = stderr
	var logMu sync.Mutex
	o, err := f.obs.open(ctx, stderr, &logMu, false /* prometheus */, true /* hold */)
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
	defer func() {
		if cerr := t.close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing: %w", cerr)
		}
		fmt.Fprintf(stderr, "session %s\n", t.id)
	}()
	s, err := t.subscribe(ctx, stdout, stderr, f)
	if err != nil {
		return err
	}
	defer s.stop()
	interrupted := false
	if err := t.be.Followup(ctx, t.id, msg); err != nil {
		if ctx.Err() == nil {
			return err
		}
		interrupted = true
	}
	if !interrupted {
		if err := t.waitIdle(ctx, s); err != nil {
			if ctx.Err() == nil {
				return notDurable(s, err)
			}
			interrupted = true
		}
	}
	if interrupted {
		if err := t.cancelAndWait(s); err != nil {
			return fmt.Errorf("interrupted; cancelling the turn: %w", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res := runResult{Session: string(t.id), Text: s.text.String(), End: "none",
		Usage: runUsageStats{InputTokens: s.usage.InputTokens, OutputTokens: s.usage.OutputTokens,
			ReasoningTokens: s.usage.ReasoningTokens.Or(0), CacheReadTokens: s.usage.CacheReadTokens.Or(0),
			CacheWriteTokens: s.usage.CacheWriteTokens.Or(0)}}
	var failure error
	if n := len(s.ends); n > 0 {
		end := s.ends[n-1].Reason
		res.End = string(end.Kind)
		switch end.Kind {
		case session.EndCompleted, session.EndMaxTokens:
		case session.EndError:
			res.Error = &runFailure{Code: end.Error.Code, Message: end.Error.Message, Status: end.Error.Status}
			failure = errors.New("turn " + describeEnd(end))
		case session.EndAborted:
			res.Cause = string(end.Cause.Kind)
			failure = errors.New("turn " + describeEnd(end))
		default:
			failure = errors.New("turn ended " + describeEnd(end))
		}
	}
	if interrupted {
		failure = errors.New("interrupted: turn cancelled")
	}
	if f.asJSON {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", visibleJSON(string(b)))
	} else if s.lastText != 0 && s.lastText != '\n' {
		fmt.Fprintln(stdout)
	}
	if failure != nil {
		return fmt.Errorf("run: %w", failure)
	}
	return nil
}
