package session

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/internal/fixtures"
)

// TestRecordEventsSizesTheCorpusExactly: the estimate that sizes
// File.Events is exact on the rows of the reference and of our writer, so
// a file is read into one allocation of the right size.
func TestRecordEventsSizesTheCorpusExactly(t *testing.T) {
	_, paths := fixtureFiles(t)
	var files [][]byte
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		require.NoError(t, err)
		files = append(files, fixtures.Substitute(raw))
	}
	ours, err := encodeFile(fileHeader, fileEvents(t, fileSession()), WriteOptions{Pack: PackChunks})
	require.NoError(t, err)
	files = append(files, ours)
	for _, data := range files {
		f, err := ParseFile(data, "s.jsonl")
		require.NoError(t, err)
		estimate := 0
		for _, ln := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")[1:] {
			estimate += recordEvents([]byte(ln))
		}
		require.Equal(t, len(f.Events), estimate)
		require.Equal(t, len(f.Events), cap(f.Events))
	}
}

// TestRecordEventsIsBoundedByTheLine: a row whose dt is all commas does not
// make the reader reserve more than one event per five bytes.
func TestRecordEventsIsBoundedByTheLine(t *testing.T) {
	line := `{"type":"text-chunks","seq0":0,"time0":0,"data":{"dt":[` + strings.Repeat(",", 10000) + `]}}`
	require.LessOrEqual(t, recordEvents([]byte(line)), len(line)/5)
	require.Equal(t, 1, recordEvents([]byte(`{"type":"turn/start","seq":0,"time":0,"data":{"dt":[1,2,3]}}`)))
	require.Equal(t, 1, recordEvents([]byte(`{"type":"text-chunks"}`)))
	require.Equal(t, 1, recordEvents(nil))
	require.Equal(t, 3, recordEvents([]byte(`{"type":"tool-call-chunks","seq0":0,"time0":0,"data":{"turn":1,"step":1,"index":0,"dt":[1,2],"id":"c","args":["a","b","c"]}}`)))
}

// TestCheckSourcesMatchesTheSet: the increasing-order shortcut of
// checkSources reports what the set alone reports (the first bad entry,
// in list order), on every small list.
func TestCheckSourcesMatchesTheSet(t *testing.T) {
	bySet := func(sources []int64, seq int64) error {
		seen := map[int64]bool{}
		for _, src := range sources {
			if src < 0 || src >= seq {
				return fmt.Errorf("sourceEventSeqs entry %d is not an earlier seq", src)
			}
			if seen[src] {
				return fmt.Errorf("sourceEventSeqs repeats %d", src)
			}
			seen[src] = true
		}
		return nil
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		sources := make([]int64, rng.IntN(7))
		for i := range sources {
			sources[i] = rng.Int64N(11) - 2
		}
		seq := rng.Int64N(9)
		require.Equal(t, errText(bySet(sources, seq)), errText(checkSources(sources, seq)), "%v at seq %d", sources, seq)
	}
}
