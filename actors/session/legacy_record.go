package session

import (
	"errors"
	"fmt"

	"github.com/dshgo/dsh/messages"
)

// DecodeStoredEvent decodes one stored event record of session sid (the
// envelope of DecodeEvent, rebuilt by a store that does not keep lines,
// such as a database row) as a reader of a stored log decodes a line: a
// record that does not decode as a current event is tried as one of the
// older shapes (legacy.go), and upgraded reports that it was one and was
// migrated. at looks up an earlier event of the same log by seq (a
// replacing tool result takes the message id of its start node); a
// lookup that fails makes such a record refuse to migrate. When the
// record is not an older shape, the error is DecodeEvent's.
func DecodeStoredEvent(line []byte, sid SessionID, at func(int64) (Event, bool)) (e Event, upgraded bool, err error) {
	e, err = DecodeEvent(line)
	if err == nil {
		return e, false, nil
	}
	j, perr := messages.ParseJSON(line)
	if perr != nil {
		return Event{}, false, err
	}
	m, lerr := migrateLegacy(j, sid, at)
	if errors.Is(lerr, errNotLegacy) {
		return Event{}, false, err
	}
	if lerr != nil {
		seq := int64(-1)
		if sj, ok := j.Field("seq"); ok {
			if n, ok := sj.AsInt(); ok {
				seq = n
			}
		}
		return Event{}, false, &DecodeError{Seq: seq, Err: lerr}
	}
	e, err = decodeEventJSON(m)
	if err != nil {
		return Event{}, false, fmt.Errorf("legacy event does not migrate: %w", err)
	}
	return e, true, nil
}
