package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/cluster/clusterpb"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/supervisor"
)

// RemoteError is a failure a grain reported. It unwraps to dsh's error
// value of its code (supervisor.ErrNoSession, supervisor.ErrExists,
// persister.ErrLocked, supervisor.ErrNotDurable, inbox.ErrInboxFull,
// agent.ErrDisposed, session.ErrFork, ...), so errors.Is works across
// members.
type RemoteError struct {
	Member string         // the member that answered
	Code   clusterpb.Code // the classification
	Msg    string         // the error text on that member
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("cluster: member %s: %s", e.Member, e.Msg)
}

// Unwrap returns the error value of the code (nil for INTERNAL).
func (e *RemoteError) Unwrap() error {
	for _, c := range codes {
		if c.code == e.Code {
			return c.err
		}
	}
	return nil
}

// ErrDiverged ends a Subscription whose session's member died after the
// subscription had received events that were not yet durable: the
// repaired log no longer holds them (it closed the interrupted turn in
// their place). Subscribe again from a seq known durable — the last
// turn/end received, say — to read the log as it is now.
var ErrDiverged = errors.New("cluster: events received are no longer in the log")

// Client reaches sessions wherever they live in a cluster: the API of a
// Member without hosting any session. A Member embeds one; Dial makes one
// for a process that only calls. It is a supervisor.Sessions, as a Host
// is, so code written against that interface runs on a cluster too. Safe
// for concurrent use.
type Client struct {
	sys      *actor.ActorSystem
	c        *pcluster.Cluster
	provider pcluster.ClusterProvider // discovers the members (a dialed client shuts it down itself)
	// attemptTimeout bounds one attempt; callTimeout bounds a call whose
	// context has no deadline.
	attemptTimeout, callTimeout time.Duration

	// attempts counts the request goroutines running: Close waits for
	// them (an abandoned attempt still ends when its grain answers, or at
	// its timeout), so nothing outlives the client.
	attempts sync.WaitGroup

	// store is the members' shared store (ClientConfig.Store), read
	// without locks by List and Peek; nil: List fails with ErrNoStore
	// and Peek asks the session's member.
	store persister.Reader

	mu      sync.Mutex
	closed  bool
	members []string // sorted addresses of the last topology
}

var (
	_ supervisor.Sessions = (*Client)(nil)
	_ supervisor.Sessions = (*Member)(nil)
)

// ErrNoStore: List on a client dialed without ClientConfig.Store, which
// has nothing to list the sessions from.
var ErrNoStore = errors.New("cluster: the client has no store to list sessions from (ClientConfig.Store)")

// newClient makes a client around a fresh actor system; its cluster is
// set by the caller.
func newClient(attempt, call time.Duration, logger *slog.Logger, opts ...actor.ConfigOption) *Client {
	cl := &Client{attemptTimeout: attempt, callTimeout: max(call, supervisor.DefaultRequestTimeout)}
	cl.sys = supervisor.NewSystem(logger, opts...)
	cl.sys.EventStream.Subscribe(cl.onTopology)
	return cl
}

// Address is this process's address in the cluster (its remote's
// host:port).
func (m *Client) Address() string { return m.sys.Address() }

// Members returns the addresses of the members currently seen, as of the
// last topology the cluster published (a client is not one of them).
func (m *Client) Members() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.members)
}

// onTopology records the members of each topology the cluster publishes
// (protoactor's own MemberList is read without its lock).
func (m *Client) onTopology(evt any) {
	t, ok := evt.(*pcluster.ClusterTopology)
	if !ok {
		return
	}
	addrs := make([]string, 0, len(t.Members))
	for _, mb := range t.Members {
		addrs = append(addrs, mb.Address())
	}
	slices.Sort(addrs)
	m.mu.Lock()
	m.members = addrs
	m.mu.Unlock()
}

// retryable says a request may go again: it did not take effect (the
// session's writer lock is held by a member letting it go, or the member
// was stopping), or the cluster could not reach the grain.
func retryable(code clusterpb.Code) bool {
	return code == clusterpb.Code_CODE_LOCKED || code == clusterpb.Code_CODE_CLOSED
}

// call sends req to the grain of id and returns its reply, retrying
// (with backoff) while the grain is unreachable or answers a retryable
// code, until ctx is done. A call without a deadline on ctx gives up
// after Session.RequestTimeout of the host (10 minutes by default).
func (m *Client) call(ctx context.Context, id session.SessionID, req proto.Message) (*clusterpb.Reply, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: empty session id", errInvalid)
	}
	if err := m.usable(); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.callTimeout)
		defer cancel()
	}
	backoff := firstRetryBackoff
	var last error
	for {
		timeout := m.attemptTimeout
		if dl, ok := ctx.Deadline(); ok {
			timeout = min(timeout, time.Until(dl))
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%w (last attempt: %w)", context.Cause(ctx), last)
		}
		if timeout > 0 {
			res, err := m.attempt(ctx, id, req, timeout)
			switch r := res.(type) {
			case *clusterpb.Reply:
				if r.Code == clusterpb.Code_CODE_OK {
					return r, nil
				}
				rerr := &RemoteError{Member: r.Member, Code: r.Code, Msg: r.Error}
				if !retryable(r.Code) {
					return r, rerr
				}
				last = rerr
			case nil:
				if err == nil {
					err = errors.New("no reply")
				}
				last = fmt.Errorf("cluster: request %T to %s: %w", req, id, err)
			default:
				return nil, fmt.Errorf("cluster: request %T to %s: unexpected reply %T", req, id, res)
			}
		}
		if err := m.usable(); err != nil {
			return nil, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last attempt: %w)", context.Cause(ctx), last)
		case <-t.C:
		}
		backoff = min(2*backoff, maxRetryBackoff)
	}
}

// attempt makes one cluster request (protoactor's Request, which
// retries a stale placement itself) and returns when it answers or ctx is
// done; an abandoned attempt ends on its own within timeout. It passes
// this member's root context explicitly: protoactor's RequestFuture falls
// back on a package-global call config that holds the root context of
// the first cluster made in the process, which with several members in
// one process would send through another member's actor system.
func (m *Client) attempt(ctx context.Context, id session.SessionID, req proto.Message, timeout time.Duration) (any, error) {
	type result struct {
		res any
		err error
	}
	done := make(chan result, 1)
	// An abandoned attempt may still be marshalling its message when the
	// next one starts: each gets its own copy.
	req = proto.Clone(req)
	m.attempts.Add(1)
	go func() {
		defer m.attempts.Done()
		res, err := m.c.Request(string(id), Kind, req, pcluster.WithTimeout(timeout), pcluster.WithContext(m.sys.Root))
		done <- result{res, err}
	}()
	select {
	case r := <-done:
		return r.res, r.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// markClosed closes the client to new calls; ErrClosed if it was.
func (m *Client) markClosed() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return supervisor.ErrClosed
	}
	m.closed = true
	return nil
}

// usable fails once the member is closed.
func (m *Client) usable() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return supervisor.ErrClosed
	}
	return nil
}

// Create starts a new, empty session on the member that owns its id
// (opts.ID, or a minted UUID).
func (m *Client) Create(ctx context.Context, opts supervisor.CreateOptions) (session.SessionID, error) {
	id, minted := opts.ID, false
	if id == "" {
		id, minted = session.SessionID(uuid.NewString()), true
	}
	hdr := session.Header{ID: id, Cwd: opts.Cwd}
	if err := hdr.Validate(); err != nil {
		return "", err
	}
	_, err := m.call(ctx, id, &clusterpb.Create{Cwd: opts.Cwd})
	// A minted id is new: EXISTS can only be an earlier attempt of this
	// call that took effect though its reply was lost.
	if minted && errors.Is(err, supervisor.ErrExists) {
		err = nil
	}
	if err != nil {
		return "", err
	}
	return id, nil
}

// Followup queues a user message for the next turn (starting one when
// idle), wherever the session lives. A followup retried across a
// failover is delivered once (the grain knows the message's id).
func (m *Client) Followup(ctx context.Context, id session.SessionID, msg messages.Message) error {
	return m.send(ctx, id, clusterpb.SendKind_SEND_KIND_FOLLOWUP, msg)
}

// Steer delivers a user message into the running turn (or starts one).
func (m *Client) Steer(ctx context.Context, id session.SessionID, msg messages.Message) error {
	return m.send(ctx, id, clusterpb.SendKind_SEND_KIND_STEER, msg)
}

// Inject adds a message the next step sees without starting a turn.
func (m *Client) Inject(ctx context.Context, id session.SessionID, msg messages.Message) error {
	return m.send(ctx, id, clusterpb.SendKind_SEND_KIND_INJECT, msg)
}

// send sends msg to the session's grain. A message too large to record
// (session.CheckMessageSize) is refused here, with session.ErrTooLarge,
// before anything goes over the network.
func (m *Client) send(ctx context.Context, id session.SessionID, kind clusterpb.SendKind, msg messages.Message) error {
	if err := session.CheckMessageSize(msg); err != nil {
		return fmt.Errorf("cluster: send to %s: %w", id, err)
	}
	b, err := msg.MarshalJSON()
	if err != nil {
		return fmt.Errorf("cluster: encode message: %w", err)
	}
	_, err = m.call(ctx, id, &clusterpb.Send{Kind: kind, Message: b, MessageId: string(msg.ID())})
	return err
}

// Cancel cancels the session's running turn.
func (m *Client) Cancel(ctx context.Context, id session.SessionID, cause session.CancelCause) error {
	_, err := m.call(ctx, id, &clusterpb.Cancel{Cause: string(cause.Kind)})
	return err
}

// SetSystem replaces the session's system prompt.
func (m *Client) SetSystem(ctx context.Context, id session.SessionID, prompt string) error {
	_, err := m.call(ctx, id, &clusterpb.SetSystem{Prompt: prompt})
	return err
}

// WaitIdle returns once the session is idle and everything it logged is
// durable, wherever it lives. Should its member die meanwhile, it waits
// on the member the session moves to.
func (m *Client) WaitIdle(ctx context.Context, id session.SessionID) error {
	for {
		r, err := m.call(ctx, id, &clusterpb.WaitIdle{WaitMs: defaultPollWait.Milliseconds()})
		if err != nil {
			return err
		}
		if r.Idle {
			return nil
		}
	}
}

// Flush makes everything the session logged durable and returns the
// durable watermark.
func (m *Client) Flush(ctx context.Context, id session.SessionID) (int64, error) {
	r, err := m.call(ctx, id, &clusterpb.Flush{})
	if err != nil {
		return -1, err
	}
	return r.Seq, nil
}

// Messages returns the session's derived messages.
func (m *Client) Messages(ctx context.Context, id session.SessionID) ([]messages.Message, error) {
	r, err := m.call(ctx, id, &clusterpb.GetMessages{})
	if err != nil {
		return nil, err
	}
	j, err := messages.ParseJSON(r.Messages)
	if err != nil {
		return nil, fmt.Errorf("cluster: messages from %s: %w", r.Member, err)
	}
	var out []messages.Message
	for v := range j.Elements() {
		msg, err := messages.ImportMessage(v)
		if err != nil {
			return nil, fmt.Errorf("cluster: messages from %s: %w", r.Member, err)
		}
		out = append(out, msg)
	}
	return out, nil
}

// Events returns the session's events from seq from on.
func (m *Client) Events(ctx context.Context, id session.SessionID, from int64) ([]session.Event, error) {
	var out []session.Event
	for {
		r, err := m.call(ctx, id, &clusterpb.GetEvents{From: from})
		if err != nil {
			return nil, err
		}
		es, err := decodeEvents(r)
		if err != nil {
			return nil, err
		}
		if len(es) == 0 {
			return out, nil
		}
		out = append(out, es...)
		from = es[len(es)-1].Seq() + 1
	}
}

func decodeEvents(r *clusterpb.Reply) ([]session.Event, error) {
	out := make([]session.Event, 0, len(r.Events))
	for _, line := range r.Events {
		ev, err := session.DecodeEvent(line)
		if err != nil {
			return nil, fmt.Errorf("cluster: event from %s: %w", r.Member, err)
		}
		out = append(out, ev)
	}
	return out, nil
}

// Fork forks the session at boundary (session.LastEvent for the end) and
// returns the new session's id. The fork is stored; it lives on the
// member its id places it on. A fork whose reply was lost (its member
// died, or the attempt timed out) is retried, and the first attempt's fork
// may then stay in the store, unreferenced.
func (m *Client) Fork(ctx context.Context, id session.SessionID, boundary int64) (session.SessionID, error) {
	r, err := m.call(ctx, id, &clusterpb.Fork{Boundary: boundary})
	if err != nil {
		return "", err
	}
	return session.SessionID(r.Id), nil
}

// Stats returns the session's counters (Resident and ResidentBytes are
// not reported across members).
func (m *Client) Stats(ctx context.Context, id session.SessionID) (supervisor.Stats, error) {
	r, err := m.call(ctx, id, &clusterpb.GetStats{})
	if err != nil {
		return supervisor.Stats{}, err
	}
	s := r.Stats
	return supervisor.Stats{Events: s.Events, Chunks: s.Chunks, Turns: s.Turns, Durable: s.Durable,
		Usage: messages.TokenUsage{InputTokens: s.InputTokens, OutputTokens: s.OutputTokens,
			ReasoningTokens: messages.Some(s.ReasoningTokens), CacheReadTokens: messages.Some(s.CacheReadTokens),
			CacheWriteTokens: messages.Some(s.CacheWriteTokens)}}, nil
}

// Owner returns the address of the member the session lives on now (it
// activates the session there if it is not).
func (m *Client) Owner(ctx context.Context, id session.SessionID) (string, error) {
	r, err := m.call(ctx, id, &clusterpb.GetStats{})
	if err != nil {
		return "", err
	}
	return r.Member, nil
}

// List names every session in the members' shared store (a session is
// stored from its first write on), sorted by id, activating none: it
// reads ClientConfig.Store, and fails with ErrNoStore without one. Use
// Owner for where a session lives.
func (m *Client) List(ctx context.Context) ([]supervisor.Info, error) {
	if err := m.usable(); err != nil {
		return nil, err
	}
	if m.store == nil {
		return nil, ErrNoStore
	}
	ls, err := m.store.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster: list: %w", err)
	}
	out := make([]supervisor.Info, len(ls))
	for i, l := range ls {
		out[i] = supervisor.Info{Header: l.Header}
	}
	return out, nil
}

// Peek describes the session and returns its events from seq from on.
// With ClientConfig.Store it reads the store and activates nothing: a
// session whose stored log ends inside a turn is Running (or was cut
// off), and the store may lag the live log by the write-behind window.
// A session not stored yet (just created), or any session when the
// client has no store, is asked of its member, which activates it there.
func (m *Client) Peek(ctx context.Context, id session.SessionID, from int64) (supervisor.Info, []session.Event, error) {
	if err := m.usable(); err != nil {
		return supervisor.Info{}, nil, err
	}
	if m.store != nil {
		st, err := m.store.Inspect(ctx, id)
		if err == nil {
			evs := st.Events[:len(st.Events)-len(st.Closers)]
			from = min(max(from, 0), int64(len(evs)))
			return supervisor.Info{Header: st.Header, Running: len(st.Closers) > 0}, evs[from:], nil
		}
		if !errors.Is(err, persister.ErrNotFound) {
			return supervisor.Info{}, nil, err
		}
	}
	evs, err := m.Events(ctx, id, from)
	if err != nil {
		return supervisor.Info{}, nil, err
	}
	return supervisor.Info{Header: session.Header{ID: id}, Resident: true}, evs, nil
}

// List names every session in the shared store (a session is stored
// from its first write on) and those resident on this member, sorted by
// id. Info.Resident says
// resident on this member; use Owner for where a session lives.
func (m *Member) List(ctx context.Context) ([]supervisor.Info, error) {
	if err := m.usable(); err != nil {
		return nil, err
	}
	return m.host.List(ctx)
}

// Peek is the host's Peek: a session resident on this member is read
// live, any other from the shared store; it activates nothing.
func (m *Member) Peek(ctx context.Context, id session.SessionID, from int64) (supervisor.Info, []session.Event, error) {
	if err := m.usable(); err != nil {
		return supervisor.Info{}, nil, err
	}
	return m.host.Peek(ctx, id, from)
}
