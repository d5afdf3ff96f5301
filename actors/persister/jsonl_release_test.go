package persister

import (
	"fmt"
	"maps"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
)

// A released session leaves nothing in the store (no entry with its
// header or path, no synced mark of its directory): a host passivates its
// idle sessions one after another, and what each left would stay for the
// life of the store. Released, the session is found on disk again by the
// next operation naming it, as an id the store never saw.
func TestJSONLReleasedSessionIsForgotten(t *testing.T) {
	ctx := t.Context()
	for _, lock := range []bool{false, true} {
		for _, enc := range encodings {
			t.Run(fmt.Sprintf("lock=%v/%s", lock, enc.name), func(t *testing.T) {
				s, m := newMemJSONL(t, JSONLConfig{Lock: lock, Plain: enc.plain})
				var builders []*jlBuilder
				for i := range 3 {
					b := newJL(t, session.SessionID(fmt.Sprintf("forget-%d", i)))
					b.textTurn("one", 2)
					require.NoError(t, s.Create(b.header()))
					require.NoError(t, s.Append(ctx, b.id(), b.events(), i != 1), "durable, or written behind")
					builders = append(builders, b)
				}
				for _, b := range builders {
					require.NoError(t, s.Release(b.id()))
				}
				known, synced := storeHolds(s)
				require.Zero(t, known, "released sessions are forgotten")
				for _, b := range builders {
					require.NotContains(t, synced, filepath.Dir(s.locate(b.header())))
				}
				require.Zero(t, m.OpenFiles())

				// Forgotten, not lost: each is found again.
				b := builders[1]
				require.ErrorIs(t, s.Create(b.header()), ErrExists)
				k := b.len()
				b.textTurn("two", 1)
				require.NoError(t, s.Append(ctx, b.id(), b.from(k), Sync), "a later write finds the file")
				got, err := s.Load(ctx, b.id())
				require.NoError(t, err)
				requireSameEvents(t, b.events(), got.Events)
				require.NoError(t, s.Release(b.id()))
				known, _ = storeHolds(s)
				require.Zero(t, known)
			})
		}
	}
}

// storeHolds returns the number of sessions s keeps an entry for, and the
// directories it has marked synced.
func storeHolds(s *JSONLStore) (sessions int, synced map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions), maps.Clone(s.synced)
}
