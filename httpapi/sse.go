package httpapi

import (
	"bufio"
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dshgo/dsh/actors/session"
)

// sseBatch bounds the events written between two flushes.
const sseBatch = 256

// events streams a session's events as Server-Sent Events: the past from
// ?from= (or after Last-Event-ID), then live ones. Each event's SSE id is
// its seq, its SSE event name its type, its data its log line.
func (s *Server) events(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	from := int64(0)
	if v := r.URL.Query().Get("from"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return badRequest("from must be a non-negative seq")
		}
		from = n
	}
	if v := strings.TrimSpace(r.Header.Get("Last-Event-ID")); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < -1 {
			return badRequest("Last-Event-ID must be a seq")
		}
		from = n + 1
	}
	select {
	case <-s.closing:
		return errShuttingDown
	default:
	}
	s.streams.Add(1)
	s.open.Add(1)
	defer func() {
		s.open.Add(-1)
		s.streams.Done()
	}()
	st, err := s.cfg.Backend.Subscribe(r.Context(), id, from)
	if err != nil {
		return err
	}
	defer st.Close()

	rc := http.NewResponseController(w)
	// The server's read deadline must not end a long stream.
	_ = rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Content-Type-Options", "nosniff")
	// A stream that ends (its subscription dropped for falling behind,
	// the backend closing) ends its connection too: a client that stopped
	// reading would otherwise find, once it reads again, a finished
	// response on an idle keep-alive connection instead of an end.
	h.Set("Connection", "close")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 32<<10)
	// flush hands what is buffered to the client within WriteTimeout; a
	// client that does not take it is disconnected.
	flush := func() bool {
		if err := rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return false
		}
		if bw.Flush() != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if _, err := bw.WriteString(": stream of " + string(id) + "\n\n"); err != nil || !flush() {
		return nil
	}
	tick := time.NewTicker(s.cfg.KeepAlive)
	defer tick.Stop()
	var line []byte
	for {
		select {
		case ev, ok := <-st.Events():
			if !ok {
				// Dropped (a slow client) or the backend closed: the client
				// resumes by reconnecting with Last-Event-ID.
				return nil
			}
			line = writeEvent(bw, line, ev)
			for n := 1; n < sseBatch; n++ {
				select {
				case ev, ok := <-st.Events():
					if !ok {
						flush()
						return nil
					}
					line = writeEvent(bw, line, ev)
					continue
				default:
				}
				break
			}
			if !flush() {
				return nil
			}
			tick.Reset(s.cfg.KeepAlive)
		case <-tick.C:
			if _, err := bw.WriteString(": keep-alive\n\n"); err != nil || !flush() {
				return nil
			}
		case <-s.closing:
			flush()
			return nil
		case <-r.Context().Done():
			return nil
		}
	}
}

// writeEvent writes ev as one SSE event; line is a reused buffer.
func writeEvent(bw *bufio.Writer, line []byte, ev session.Event) []byte {
	line = session.AppendEvent(line[:0], ev)
	bw.WriteString("id: ")
	bw.WriteString(strconv.FormatInt(ev.Seq(), 10))
	bw.WriteString("\nevent: ")
	bw.WriteString(strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return '?'
		}
		return r
	}, string(ev.Type())))
	bw.WriteString("\ndata: ")
	// A line break can only be JSON whitespace here; each one starts a
	// new data line, which the client joins back with a newline.
	for rest := line; ; {
		i := bytes.IndexAny(rest, "\r\n")
		if i < 0 {
			bw.Write(rest)
			break
		}
		bw.Write(rest[:i])
		bw.WriteString("\ndata: ")
		rest = rest[i+1:]
	}
	bw.WriteString("\n\n")
	return line
}
