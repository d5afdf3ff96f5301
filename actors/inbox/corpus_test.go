package inbox

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/fixtures"
)

func readCorpus(t *testing.T, path string) *session.File {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	f, err := session.ParseFile(fixtures.Substitute(data), path)
	require.NoError(t, err)
	return f
}

func splices(f *session.File) []session.Event {
	var out []session.Event
	for _, e := range f.Events {
		if e.Type() == session.TypeInboxSpliced {
			out = append(out, e)
		}
	}
	return out
}

// The first two splices of text-turn, the prompt's insert and its claim,
// are reproduced byte for byte from the same message, start and turn.
func TestSpliceJSONMatchesTextTurnCorpus(t *testing.T) {
	dir, err := fixtures.CorpusDir()
	require.NoError(t, err)
	f := readCorpus(t, filepath.Join(dir, "acp", "text-turn", "session.jsonl"))
	sp := splices(f)
	require.GreaterOrEqual(t, len(sp), 2)

	s := newState(t, Config{})
	m := sp[0].Payload().(session.InboxSpliced).Inserted()[0]
	p := must(t)(s.planAppend(NextTurn, m, External))
	require.Equal(t, sp[0].Data().String(), p.Draft().Data().String())
	_, err = s.apply(p, sp[0])
	require.NoError(t, err)

	claims := s.planClaim(NextTurn, 1)
	require.Len(t, claims, 1)
	require.Equal(t, `{"target":"next-turn","start":0,"removedCount":1,"inserted":[]}`, claims[0].Draft().Data().String())
	require.Equal(t, sp[1].Data().String(), claims[0].Draft().Data().String())
	n, err := s.apply(claims[0], sp[1])
	require.NoError(t, err)
	require.Equal(t, m.ID(), n.Claimed[0].ID())
	require.Zero(t, s.Len())
}

// Every splice in the corpus is one the core plans, JSON-equal and byte
// for byte, from the operation its shape names: an insert, a canceled
// splice, or a claim (next-step whole, next-turn's first message). Every
// corpus log rebuilds and folds.
func TestCorpusSplicesAreReproducedByPlans(t *testing.T) {
	files, err := fixtures.CorpusFiles()
	require.NoError(t, err)
	var total, claims, canceled int
	for _, path := range files {
		f := readCorpus(t, path)
		seed := f.Header.SeedLength.Or(0)
		s := newState(t, Config{})
		var turn int64
		for _, e := range f.Events {
			if tp, ok := e.Payload().(session.TurnStart); ok {
				turn = tp.Turn
			}
			if e.Seq() < seed || e.Type() != session.TypeInboxSpliced {
				continue
			}
			total++
			ev := e.Payload().(session.InboxSpliced)
			removed := ev.RemovedCount.Or(0)
			var p splicePlan
			switch {
			case ev.Outcome == "" && removed > 0:
				claims++
				target := Target(ev.Target)
				if target == NextTurn {
					require.Empty(t, s.NextStep(), "%s seq %d: next-step is claimed first", path, e.Seq())
				}
				plans := s.planClaim(target, turn)
				require.Len(t, plans, 1, "%s seq %d", path, e.Seq())
				p = plans[0]
			default:
				if ev.Outcome != "" {
					canceled++
				}
				var ok bool
				p, ok, err = s.planSplice(Target(ev.Target), ev.Start, removed, ev.Inserted(), Loop)
				require.NoError(t, err, "%s seq %d", path, e.Seq())
				require.True(t, ok)
			}
			require.True(t, p.Draft().Data().Equal(e.Data()), "%s seq %d:\nplan %s\nlog  %s", path, e.Seq(), p.Draft().Data(), e.Data())
			require.Equal(t, e.Data().String(), p.Draft().Data().String(), "%s seq %d", path, e.Seq())
			_, err := s.apply(p, e)
			require.NoError(t, err, "%s seq %d", path, e.Seq())
		}

		r, err := Rebuild(slices.Values(f.Events), seed, Config{})
		require.NoError(t, err, path)
		require.True(t, r.Equal(s), path)
		_, err = foldConsumedWork(slices.Values(f.Events[seed:]))
		require.NoError(t, err, path)
	}
	t.Logf("%d files, %d splices (%d claims, %d canceled)", len(files), total, claims, canceled)
	require.Positive(t, claims)
	require.Positive(t, canceled)
}
