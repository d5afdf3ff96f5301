package session

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRefusesAnEventWhoseRecordTheReaderWouldRefuse: an event whose record
// would be longer than DefaultMaxRecordBytes (the longest line the reader
// accepts) is refused at append with a *TooLargeError (ErrTooLarge and
// ErrInvalid), changing nothing; one exactly at the limit is committed,
// written and read back.
func TestRefusesAnEventWhoseRecordTheReaderWouldRefuse(t *testing.T) {
	l := newTestLog(t)
	appendOK(t, l, TurnStart{Turn: 1}.Draft())
	seq, now := l.Len(), testNow+l.Len()

	// The record of a user message of n ASCII bytes is n plus a constant.
	small := UserMessage{Message: userText(t, "x")}.Draft()
	probe, err := l.build(small, now)
	require.NoError(t, err)
	n := DefaultMaxRecordBytes - (len(AppendEvent(nil, probe)) - 1)

	before := stateOf(l)
	_, err = l.Append(UserMessage{Message: userText(t, strings.Repeat("x", n+1))}.Draft(), now)
	require.ErrorIs(t, err, ErrTooLarge)
	require.ErrorIs(t, err, ErrInvalid)
	var tl *TooLargeError
	require.ErrorAs(t, err, &tl)
	require.Equal(t, DefaultMaxRecordBytes+1, tl.Size)
	require.Equal(t, DefaultMaxRecordBytes, tl.Limit)
	require.Contains(t, err.Error(), "limit of 16777216 bytes")
	requireUnchanged(t, l, before)

	// Mirror checks the same rule.
	big, err := l.build(UserMessage{Message: userText(t, strings.Repeat("y", 17<<20))}.Draft(), now)
	require.NoError(t, err)
	require.ErrorIs(t, l.Mirror(big), ErrTooLarge)
	requireUnchanged(t, l, before)

	e, err := l.Append(UserMessage{Message: userText(t, strings.Repeat("x", n))}.Draft(), now)
	require.NoError(t, err)
	require.Equal(t, seq, e.Seq())
	rec := AppendEvent(nil, e)
	require.Len(t, rec, DefaultMaxRecordBytes)
	got, err := DecodeRecord(rec)
	require.NoError(t, err)
	require.True(t, e.Equal(got[0]))

	file := append([]byte(l.Header().JSON().String()+"\n"), AppendRecords(nil, l.Events().Slice(), PackChunks)...)
	f, err := Read(bytes.NewReader(file), "s.jsonl", ReadOptions{})
	require.NoError(t, err)
	require.Nil(t, f.Torn, "the whole log reads back")
	requireSameEvents(t, l.Events().Slice(), f.Events)
}
