package deepseek

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// maxEventBytes bounds one SSE line and one event's joined data. A real
// chunk is a few hundred bytes; the bound only stops a broken or hostile
// server from growing memory without limit.
const maxEventBytes = 8 << 20

// errEventTooLarge reports a line or event past maxEventBytes.
var errEventTooLarge = errors.New("deepseek: SSE event larger than 8 MiB")

// sseEvent is one dispatched server-sent event that carried data. Data is
// the event's data lines joined with "\n"; it is valid until the next call
// to next. Name is the "event:" field ("" when absent).
type sseEvent struct {
	name string
	data []byte
}

// sseReader splits a text/event-stream body into events, following the
// WHATWG event-stream rules where an LLM stream can reach them:
//
//   - lines end in LF, CRLF or a lone CR;
//   - a line starting with ':' is a comment (": keep-alive",
//     ": OPENROUTER PROCESSING") and is skipped;
//   - "field: value" loses one space after the colon; a line without a
//     colon is a field with an empty value;
//   - data fields accumulate, joined with "\n"; a blank line dispatches the
//     event; an event without a data field is not dispatched;
//   - id and retry fields are ignored (nothing here reconnects).
//
// At EOF the standard discards an event that was not ended by a blank
// line. One exception is made: a final "data: [DONE]" whose blank line
// never came is still dispatched, since the server clearly finished.
//
// A lone CR is only recognised inside a physical line read up to LF; a
// server ending its lines with CR alone would see its events delayed to
// the next LF or EOF. No OpenAI-compatible server does that.
//
// An sseReader is not safe for concurrent use.
type sseReader struct {
	r    *bufio.Reader
	long []byte // a physical line longer than r's buffer, assembled

	// rest holds the lines of a physical line that were split at lone
	// CRs and not yet consumed (rare; copied, since r's buffer moves on).
	rest [][]byte

	data    []byte // the current event's data
	hasData bool
	name    []byte // the current event's name
}

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 16<<10)}
}

// next returns the next event that carries data. At the end of the body it
// returns io.EOF; a read error is returned as it is.
func (s *sseReader) next() (sseEvent, error) {
	for {
		line, err := s.line()
		if err != nil {
			if err == io.EOF && s.hasData && string(bytes.TrimSpace(s.data)) == "[DONE]" {
				s.hasData = false
				return sseEvent{data: s.data}, nil
			}
			return sseEvent{}, err
		}
		if ev, ok, err := s.field(line); err != nil {
			return sseEvent{}, err
		} else if ok {
			return ev, nil
		}
	}
}

// field interprets one line. It reports an event when the line is blank
// and the event had data.
func (s *sseReader) field(line []byte) (sseEvent, bool, error) {
	if len(line) == 0 {
		if !s.hasData {
			s.name = s.name[:0]
			return sseEvent{}, false, nil
		}
		ev := sseEvent{data: s.data}
		if len(s.name) > 0 {
			ev.name = string(s.name)
		}
		s.hasData = false
		s.data = s.data[:0]
		s.name = s.name[:0]
		return ev, true, nil
	}
	if line[0] == ':' {
		return sseEvent{}, false, nil
	}
	key, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		key, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(key) { // no allocation: the compiler special-cases this
	case "data":
		if s.hasData {
			s.data = append(s.data, '\n')
		}
		if len(s.data)+len(value) > maxEventBytes {
			return sseEvent{}, false, errEventTooLarge
		}
		s.data = append(s.data, value...)
		s.hasData = true
	case "event":
		s.name = append(s.name[:0], value...)
	}
	return sseEvent{}, false, nil
}

// line returns the next line without its terminator. The slice is valid
// until the next call. At EOF a final unterminated line is returned first,
// then io.EOF.
func (s *sseReader) line() ([]byte, error) {
	if len(s.rest) > 0 {
		l := s.rest[0]
		s.rest = s.rest[1:]
		return l, nil
	}
	phys, err := s.physical()
	if err != nil && (err != io.EOF || len(phys) == 0) {
		return nil, err
	}
	phys = bytes.TrimSuffix(phys, []byte{'\n'})
	phys = bytes.TrimSuffix(phys, []byte{'\r'})
	if bytes.IndexByte(phys, '\r') < 0 {
		return phys, nil
	}
	parts := bytes.Split(phys, []byte{'\r'})
	for _, p := range parts[1:] {
		s.rest = append(s.rest, bytes.Clone(p))
	}
	return parts[0], nil
}

// physical reads up to and including the next LF. At EOF it returns what
// is left, with io.EOF.
func (s *sseReader) physical() ([]byte, error) {
	s.long = s.long[:0]
	for {
		b, err := s.r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			if len(s.long)+len(b) > maxEventBytes {
				return nil, errEventTooLarge
			}
			s.long = append(s.long, b...)
			continue
		}
		if len(s.long) > 0 {
			s.long = append(s.long, b...)
			b = s.long
		}
		return b, err
	}
}
