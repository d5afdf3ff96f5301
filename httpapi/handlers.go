package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/supervisor"
)

// The session statuses of a listing.
const (
	statusIdle       = "idle"       // resident, no turn running
	statusRunning    = "running"    // resident, a turn running
	statusPassivated = "passivated" // stored, passivated by this server's host
	statusStored     = "stored"     // stored, not resident
)

// maxTitle bounds a listed title, in bytes.
const maxTitle = 200

type tokensJSON struct {
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
}

// sessionJSON is one session of a listing, and the answer of GET
// /v1/sessions/{id}.
type sessionJSON struct {
	ID      string     `json:"id"`
	Created int64      `json:"created"`
	Status  string     `json:"status"`
	Events  int64      `json:"events"`
	Turns   int64      `json:"turns"`
	Tokens  tokensJSON `json:"tokens"`
	Title   string     `json:"title"`
}

func statusOfInfo(i supervisor.Info) string {
	switch {
	case i.Running:
		return statusRunning
	case i.Resident:
		return statusIdle
	case i.Passivated:
		return statusPassivated
	}
	return statusStored
}

// summarize folds a session's events into its listing entry.
func summarize(info supervisor.Info, evs []session.Event) sessionJSON {
	out := sessionJSON{ID: string(info.Header.ID), Created: info.Header.CreatedAt, Status: statusOfInfo(info),
		Events: int64(len(evs))}
	var title, first string
	for _, ev := range evs {
		switch p := ev.Payload().(type) {
		case session.TurnEnd:
			out.Turns++
		case session.AssistantMessage:
			if p.HasUsage {
				out.Tokens.Input += p.Usage.InputTokens
				out.Tokens.Output += p.Usage.OutputTokens
			}
		case session.UserMessage:
			if first == "" && p.Message.Source().Kind() == messages.SourceUser {
				for b := range p.Message.Blocks() {
					if t := strings.TrimSpace(b.Text()); t != "" {
						first, _, _ = strings.Cut(t, "\n")
						break
					}
				}
			}
		default:
			if ev.Type() == "session/title" {
				if t, ok := ev.Data().Field("title"); ok {
					if s, ok := t.AsString(); ok {
						title = s
					}
				}
			}
		}
	}
	if title == "" {
		title = first
	}
	out.Title = clip(title, maxTitle)
	return out
}

// clip cuts s to at most n bytes, at a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

type createBody struct {
	ID     *string `json:"id"`
	System *string `json:"system"`
}

type idJSON struct {
	ID string `json:"id"`
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) error {
	var body createBody
	if err := decode(r, &body, true); err != nil {
		return err
	}
	var opts supervisor.CreateOptions
	if body.ID != nil {
		if err := checkID("id", *body.ID); err != nil {
			return err
		}
		opts.ID = session.SessionID(*body.ID)
	}
	if body.System != nil && len(*body.System) > s.cfg.MaxText {
		return badRequest(fmt.Sprintf("system is over %d bytes", s.cfg.MaxText))
	}
	id, err := s.cfg.Backend.Create(r.Context(), opts)
	if err != nil {
		return err
	}
	if body.System != nil && *body.System != "" {
		if err := s.cfg.Backend.SetSystem(r.Context(), id, *body.System); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusCreated, idJSON{string(id)})
	return nil
}

type listJSON struct {
	Sessions []sessionJSON `json:"sessions"`
	// Next is the after= of the next page; absent on the last.
	Next string `json:"next,omitempty"`
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit := defaultPageLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageLimit {
			return badRequest(fmt.Sprintf("limit must be an integer in [1, %d]", maxPageLimit))
		}
		limit = n
	}
	after := q.Get("after")
	infos, err := s.cfg.Backend.List(r.Context())
	if err != nil {
		return err
	}
	start, _ := slices.BinarySearchFunc(infos, after, func(i supervisor.Info, id string) int {
		return strings.Compare(string(i.Header.ID), id)
	})
	if start < len(infos) && string(infos[start].Header.ID) == after {
		start++
	}
	page := infos[start:min(start+limit, len(infos))]
	out := listJSON{Sessions: make([]sessionJSON, 0, len(page))}
	for _, i := range page {
		info, evs, err := s.cfg.Backend.Peek(r.Context(), i.Header.ID, 0)
		if errors.Is(err, supervisor.ErrNoSession) {
			continue // gone since the listing
		}
		if err != nil {
			return err
		}
		out.Sessions = append(out.Sessions, summarize(info, evs))
	}
	if start+limit < len(infos) && len(page) > 0 {
		out.Next = string(page[len(page)-1].Header.ID)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	info, evs, err := s.cfg.Backend.Peek(r.Context(), id, 0)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, summarize(info, evs))
	return nil
}

type sendBody struct {
	Text *string   `json:"text"`
	Mode *sendMode `json:"mode"`
	ID   *string   `json:"id"`
}

// sentJSON answers a send: the message id, and with ?wait=true the turn
// that took the message and how it ended.
type sentJSON struct {
	ID     string          `json:"id"`
	Turn   int64           `json:"turn,omitempty"`
	Reason json.RawMessage `json:"reason,omitempty"`
	// Discarded: a cancel discarded the message from the inbox before a
	// turn took it.
	Discarded bool `json:"discarded,omitempty"`
}

// clientIDSpace is the namespace of the message ids derived from client
// message ids.
var clientIDSpace = uuid.MustParse("1f0b8f2e-4d0c-5a8e-9d3a-6c1e2b7a9f40")

func (s *Server) send(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var body sendBody
	if err := decode(r, &body, false); err != nil {
		return err
	}
	if body.Text == nil {
		return badRequest("text is required")
	}
	if len(*body.Text) > s.cfg.MaxText {
		return badRequest(fmt.Sprintf("text is over %d bytes", s.cfg.MaxText))
	}
	mode := modeFollowup
	if body.Mode != nil {
		mode = *body.Mode
	}
	if mode != modeFollowup && mode != modeSteer && mode != modeInject {
		return badRequest(`mode must be "followup", "steer" or "inject"`)
	}
	wait := false
	if v := r.URL.Query().Get("wait"); v != "" {
		if wait, err = strconv.ParseBool(v); err != nil {
			return badRequest("wait must be true or false")
		}
	}
	if wait && mode == modeInject {
		return badRequest("wait=true is for followup and steer (an injected message starts no turn)")
	}
	msg, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(*body.Text)}, messages.UserSource())
	if err != nil {
		return badRequest(err.Error())
	}
	ctx := r.Context()
	if body.ID != nil {
		if err := checkID("id", *body.ID); err != nil {
			return err
		}
		// The message id is derived from the session and the client's id,
		// so a retry carries the same one and is found in the log.
		mid := uuid.NewSHA1(clientIDSpace, []byte(string(id)+"\x00"+*body.ID)).String()
		if msg, err = withID(msg, mid); err != nil {
			return err
		}
		unlock := s.keys.lock(string(id) + "\x00" + mid)
		defer unlock()
	}
	if body.ID != nil {
		_, evs, err := s.cfg.Backend.Peek(ctx, id, 0)
		if err != nil {
			return err
		}
		if logged(evs, string(msg.ID())) {
			return s.sent(w, r, id, string(msg.ID()), wait)
		}
	}
	if err := deliver(ctx, s.cfg.Backend, id, mode, msg); err != nil {
		if !errors.Is(err, inbox.ErrDuplicateID) {
			return err
		}
		// The same message is pending already: delivered once.
	}
	return s.sent(w, r, id, string(msg.ID()), wait)
}

// withID returns m with the id mid.
func withID(m messages.Message, mid string) (messages.Message, error) {
	var o messages.ObjectBuilder
	j := m.JSON()
	role, _ := j.Field("role")
	content, _ := j.Field("content")
	src, _ := j.Field("source")
	o.String("id", mid).Raw("role", role).Raw("content", content).Raw("source", src)
	return messages.ImportMessage(o.Build())
}

// logged reports whether the message mid is in the log: taken into a
// turn (user/message) or pending in the inbox (a splice carrying it).
func logged(evs []session.Event, mid string) bool {
	for _, ev := range evs {
		switch ev.Type() {
		case session.TypeUserMessage:
			if m, ok := ev.Message(); ok && string(m.ID()) == mid {
				return true
			}
		case session.TypeInboxSpliced:
			if strings.Contains(ev.Data().String(), mid) {
				return true
			}
		}
	}
	return false
}

// sent answers a delivered message: 202 at once, or with wait once the
// turn that took it has ended and is durable.
func (s *Server) sent(w http.ResponseWriter, r *http.Request, id session.SessionID, mid string, wait bool) error {
	if !wait {
		writeJSON(w, http.StatusAccepted, sentJSON{ID: mid})
		return nil
	}
	turn, reason, err := s.waitTurn(r.Context(), id, mid)
	if err != nil {
		return err
	}
	if _, err := s.cfg.Backend.Flush(r.Context(), id); err != nil {
		return err
	}
	if reason == nil {
		writeJSON(w, http.StatusOK, sentJSON{ID: mid, Discarded: true})
		return nil
	}
	writeJSON(w, http.StatusOK, sentJSON{ID: mid, Turn: turn, Reason: reason})
	return nil
}

// waitTurn waits for the turn that takes message mid to end, and returns
// it with its end reason: the first turn/end after the user/message that
// carries mid. A message a cancel discarded from the inbox before any
// turn took it returns a nil reason.
func (s *Server) waitTurn(ctx context.Context, id session.SessionID, mid string) (int64, json.RawMessage, error) {
	info, _, err := s.cfg.Backend.Peek(ctx, id, 1<<62)
	if err != nil {
		return 0, nil, err
	}
	seed := info.Header.SeedLength.Or(0)
	st, err := s.cfg.Backend.Subscribe(ctx, id, 0)
	if err != nil {
		return 0, nil, err
	}
	defer st.Close()
	taken := false
	var splices []session.Event
	pending := func(evs []session.Event) bool {
		in, err := inbox.Rebuild(slices.Values(evs), seed, inbox.Config{MaxPending: math.MaxInt32})
		if err != nil {
			return false
		}
		_, _, ok := in.Lookup(messages.MessageID(mid))
		return ok
	}
	for {
		select {
		case ev, ok := <-st.Events():
			if !ok {
				if err := st.Err(); err != nil {
					return 0, nil, err
				}
				return 0, nil, errShuttingDown
			}
			switch p := ev.Payload().(type) {
			case session.UserMessage:
				if string(p.Message.ID()) == mid {
					taken = true
				}
			case session.TurnEnd:
				if taken {
					return p.Turn, json.RawMessage(p.Reason.JSON().String()), nil
				}
			case session.InboxSpliced:
				splices = append(splices, ev)
				if !taken && p.Outcome == "canceled" && pending(splices[:len(splices)-1]) && !pending(splices) {
					return 0, nil, nil
				}
			}
		case <-s.closing:
			return 0, nil, errShuttingDown
		case <-ctx.Done():
			return 0, nil, context.Cause(ctx)
		}
	}
}

type messagesJSON struct {
	Messages []messages.Message `json:"messages"`
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	ms, err := s.cfg.Backend.Messages(r.Context(), id)
	if err != nil {
		return err
	}
	if ms == nil {
		ms = []messages.Message{}
	}
	writeJSON(w, http.StatusOK, messagesJSON{ms})
	return nil
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := decode(r, &struct{}{}, true); err != nil {
		return err
	}
	if err := s.cfg.Backend.Cancel(r.Context(), id, session.CancelCause{Kind: session.CauseUser}); err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, idJSON{string(id)})
	return nil
}

type forkBody struct {
	At *int64 `json:"at"`
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var body forkBody
	if err := decode(r, &body, false); err != nil {
		return err
	}
	if body.At == nil || *body.At < 0 {
		return badRequest("at (a non-negative seq) is required")
	}
	child, err := s.cfg.Backend.Fork(r.Context(), id, *body.At)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, idJSON{string(child)})
	return nil
}
