package synthetic

import (
	"strings"
	"sync"

	"github.com/dshgo/dsh/messages"
)

// The text a synthetic model writes is cut from one pregenerated string, so
// that emitting a delta allocates nothing.
//
// The corpus is piecesPerCorpus pieces of ChunkSize bytes, built from a
// fixed word list (plain ASCII, so that a cut at any byte is valid UTF-8
// and every delta is a well-formed JSON string without escapes); the corpus
// and its delta chunks are built once per ChunkSize and shared by every
// provider with that size. The block text of a response is the substring
// span[start : start+n*ChunkSize] of span, the corpus repeated until it
// covers the longest block that can start at the last piece; because span
// has period len(corpus), delta k of a block starting at piece p is the
// corpus piece (p+k) mod piecesPerCorpus, and its chunk is taken from a
// pregenerated table (one per block index and delta type). Only the
// block-end (which carries the assembled text), usage, and the rare
// tool-call chunks are built per response.
//
// Rejected: building each delta with messages.TextDeltaChunk on the fly.
// It costs two allocations per delta (the JSON text and the builder), which
// is most of the cost of a stream the bench wants to be free.

// piecesPerCorpus is the number of distinct delta pieces. A block starts at
// a random piece among those that begin a word (about one in five at the
// default ChunkSize), so that its text reads from a word boundary.
const piecesPerCorpus = 1024

// words is the vocabulary of the corpus. Only ASCII letters: no escapes,
// no multi-byte runes to cut in half.
var words = strings.Fields(`
the a of and to in is it that for on with as was at by be this from are
or an but not have has had were which one all can will there their what
about so out up if when who more no time into some could them other than
then now only its also after use two how our first well way even new
want because any these give day most us model stream chunk token session
actor message event log replay step turn tool call result reasoning text
block usage finish agent inbox persist flush durable write read seed
`)

// textTables holds the corpus and the pregenerated chunks of one provider.
// It is immutable after newTextTables.
type textTables struct {
	span string // the corpus repeated to cover every block
	*deltaTables
}

// deltaTables holds the corpus and the delta chunks for one piece size.
// They depend on nothing else, so every provider with that ChunkSize shares
// one (built on first use, kept for the life of the process: a few hundred
// KiB per size in use). Immutable once published.
type deltaTables struct {
	size   int // bytes per piece (Config.ChunkSize)
	corpus string
	// wordStarts are the pieces that begin with a word (the byte before
	// is a space): a block starts at one of them, so its text reads from
	// a word boundary, not from the middle of a word.
	wordStarts []int
	text       [textIndexes][]messages.StreamChunk
	reasoning  []messages.StreamChunk // index 0 only: reasoning opens a response
}

// sharedDeltas maps a piece size to its *deltaTables. Two providers racing
// to build the same size both build; one result wins, and both are equal.
var sharedDeltas sync.Map

// The block indexes the tables cover: reasoning is always block 0; text is
// block 0, or block 1 after a reasoning block.
const textIndexes = 2

// newTextTables returns the tables for pieces of size bytes and blocks of
// up to maxPieces deltas.
func newTextTables(size, maxPieces int) *textTables {
	d, ok := sharedDeltas.Load(size)
	if !ok {
		d, _ = sharedDeltas.LoadOrStore(size, newDeltaTables(size))
	}
	dt := d.(*deltaTables)
	reps := 1 + (maxPieces+piecesPerCorpus-1)/piecesPerCorpus
	return &textTables{span: strings.Repeat(dt.corpus, reps), deltaTables: dt}
}

func newDeltaTables(size int) *deltaTables {
	corpusLen := size * piecesPerCorpus
	var b strings.Builder
	b.Grow(corpusLen + 16)
	// A fixed walk over the word list (a linear congruential sequence, not
	// the provider's seed): every provider writes the same corpus, and the
	// seed only picks where each block starts.
	x := uint32(1)
	sentence := 0
	for b.Len() < corpusLen {
		x = x*1664525 + 1013904223
		w := words[int(x>>16)%len(words)]
		sentence++
		if sentence%12 == 0 {
			b.WriteString(w)
			b.WriteString(". ")
			continue
		}
		b.WriteString(w)
		b.WriteByte(' ')
	}
	t := &deltaTables{size: size, corpus: b.String()[:corpusLen]}
	for p := range piecesPerCorpus {
		if p == 0 || t.corpus[p*size-1] == ' ' {
			t.wordStarts = append(t.wordStarts, p)
		}
	}
	for idx := range textIndexes {
		t.text[idx] = make([]messages.StreamChunk, piecesPerCorpus)
		for p := range piecesPerCorpus {
			t.text[idx][p] = messages.TextDeltaChunk(idx, t.piece(p))
		}
	}
	t.reasoning = make([]messages.StreamChunk, piecesPerCorpus)
	for p := range piecesPerCorpus {
		t.reasoning[p] = messages.ReasoningDeltaChunk(0, t.piece(p))
	}
	return t
}

// startPiece draws the first piece of a block: one that begins a word.
func (t *deltaTables) startPiece(r *rng) int { return t.wordStarts[r.intn(len(t.wordStarts))] }

// piece returns corpus piece p.
func (t *deltaTables) piece(p int) string { return t.corpus[p*t.size : (p+1)*t.size] }

// blockText returns the text of a block of n pieces starting at piece p.
func (t *textTables) blockText(p, n int) string { return t.span[p*t.size : (p+n)*t.size] }

// delta returns delta k of a block of type bt at index idx starting at
// piece p.
func (t *deltaTables) delta(bt messages.BlockType, idx, p, k int) messages.StreamChunk {
	q := (p + k) % piecesPerCorpus
	if bt == messages.BlockReasoning {
		return t.reasoning[q]
	}
	return t.text[idx][q]
}

// words appends n words of the vocabulary picked by r to b, separated by
// spaces: the argument text of a tool call.
func appendWords(b []byte, r *rng, n int) []byte {
	for i := range n {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, words[r.intn(len(words))]...)
	}
	return b
}
