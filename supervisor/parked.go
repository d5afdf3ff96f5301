package supervisor

import (
	"encoding/binary"

	"github.com/dshgo/dsh/messages"
)

// parkedStats is what the host keeps of a session it passivated or
// evicted: the counters Stats reports for it (those it had when it went),
// and through them what a reactivation carries over (WriteFailures,
// WriteRetries). They are packed as unsigned varints in a string, about
// a dozen bytes for a short session, so that a host which has passivated
// a million sessions keeps a small map entry for each and nothing else;
// the counters' full Stats value is 130 bytes, stored apart from the map
// slot.
type parkedStats string

// parkedFields is the number of counters packed, in the order of
// packStats. Every counter is non-negative.
const parkedFields = 10

// packStats packs the counters of st.
func packStats(st Stats) parkedStats {
	u := st.Usage
	fields := [parkedFields]int64{st.Events, st.Chunks, st.Turns, u.InputTokens, u.OutputTokens,
		u.ReasoningTokens.Or(0), u.CacheReadTokens.Or(0), u.CacheWriteTokens.Or(0), st.WriteFailures, st.WriteRetries}
	var buf [parkedFields * binary.MaxVarintLen64]byte
	b := buf[:0]
	for _, f := range fields {
		b = binary.AppendUvarint(b, uint64(f))
	}
	return parkedStats(b)
}

// stats unpacks p: the Stats of a session that is not resident.
func (p parkedStats) stats() Stats {
	var f [parkedFields]int64
	s := string(p)
	for i := range f {
		v, n := binary.Uvarint([]byte(s))
		if n <= 0 {
			break // cannot be: packStats wrote every field
		}
		f[i], s = int64(v), s[n:]
	}
	return Stats{Events: f[0], Chunks: f[1], Turns: f[2], Durable: -1,
		Usage: messages.TokenUsage{InputTokens: f[3], OutputTokens: f[4], ReasoningTokens: messages.Some(f[5]),
			CacheReadTokens: messages.Some(f[6]), CacheWriteTokens: messages.Some(f[7])},
		WriteFailures: f[8], WriteRetries: f[9]}
}
