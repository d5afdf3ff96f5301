package synthetic

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

// TestBlocksStartAtAWord: every text and reasoning block reads from the
// start of a word of the vocabulary, whatever the seed and chunk size;
// the deltas keep their size.
func TestBlocksStartAtAWord(t *testing.T) {
	vocab := map[string]bool{}
	for _, w := range words {
		vocab[w] = true
	}
	for _, size := range []int{DefaultChunkSize, 7, 64} {
		for seed := range int64(60) {
			p := newProvider(t, Config{Seed: seed, ChunkSize: size, ReasoningRate: 0.5, TextChunks: 20, ReasoningChunks: 20})
			r := collect(t, p, context.Background(), request(t, "s", "hello"))
			require.NoError(t, r.err)
			blocks := map[int]*strings.Builder{}
			for _, c := range r.chunks {
				if c.Type() != messages.ChunkTextDelta && c.Type() != messages.ChunkReasoningDelta {
					continue
				}
				require.Len(t, c.Text(), size, "a delta is ChunkSize bytes")
				if blocks[c.Index()] == nil {
					blocks[c.Index()] = &strings.Builder{}
				}
				blocks[c.Index()].WriteString(c.Text())
			}
			require.NotEmpty(t, blocks)
			for i, b := range blocks {
				text := b.String()
				require.NotEqual(t, byte(' '), text[0], "seed %d size %d block %d: %q", seed, size, i, text)
				if strings.Contains(text, " ") { // the first word is whole
					first := strings.TrimSuffix(strings.Fields(text)[0], ".")
					require.True(t, vocab[first], "seed %d size %d block %d starts mid-word: %q", seed, size, i, text)
				}
			}
		}
	}
}
