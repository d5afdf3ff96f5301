package replay

import (
	"iter"
	"slices"

	"github.com/dshgo/dsh/messages"
)

// Kind names what a scripted stream call does (the ReplayEntry kinds of the
// reference's replay.override.json).
type Kind string

// The entry kinds.
const (
	// KindChunks serves its chunks. A recorded group that does not end in a
	// finish (a stream cut by a cancel or a crash) then blocks until the
	// call is cancelled: see Entry.Open.
	KindChunks Kind = "chunks"
	// KindThrow serves its chunks, then fails with its LlmFailure.
	KindThrow Kind = "throw"
	// KindHang blocks until the call is cancelled, after creating its ready
	// file, if it has one.
	KindHang Kind = "hang"
)

// Entry is one scripted stream call: a recorded chunk group, a summariser
// stream rebuilt from a compaction/summary event, or an override entry. It
// is immutable and safe for concurrent use.
type Entry struct {
	kind      Kind
	chunks    []messages.StreamChunk // never modified after construction
	failure   messages.LlmFailure    // throw
	readyFile string                 // hang, optional
	origin    Origin
	recorded  bool
}

// Origin says where a recorded entry comes from.
type Origin struct {
	// Turn and Step are the recorded turn and step of a chunk group (for a
	// summariser stream, those of the last step/start before it, 0 when
	// none).
	Turn, Step int64
	// Attempt numbers the groups of one (turn, step) from 1: an attempt
	// ends with its finish chunk, and chunks of the same step after it are
	// the next attempt (a retry).
	Attempt int
	// FirstSeq and LastSeq are the seqs of the group's first and last
	// chunk (of the compaction/summary event for a summariser stream).
	FirstSeq, LastSeq int64
	// Compaction marks a summariser stream rebuilt from a
	// compaction/summary event with llmStreamCall: true.
	Compaction bool
}

// ChunksEntry returns an entry serving chunks (copied).
func ChunksEntry(chunks []messages.StreamChunk) Entry {
	return Entry{kind: KindChunks, chunks: slices.Clone(chunks)}
}

// ThrowEntry returns an entry serving chunks (copied), then failing with f.
// f must be valid (messages.LlmFailure.Validate).
func ThrowEntry(chunks []messages.StreamChunk, f messages.LlmFailure) Entry {
	return Entry{kind: KindThrow, chunks: slices.Clone(chunks), failure: f}
}

// HangEntry returns an entry that blocks until cancelled. readyFile, when
// not "", is created when the hang starts (a relative path is resolved
// against Options.ReadyDir).
func HangEntry(readyFile string) Entry {
	return Entry{kind: KindHang, readyFile: readyFile}
}

// Kind returns the entry's kind.
func (e Entry) Kind() Kind { return e.kind }

// Chunks iterates the chunks the entry serves.
func (e Entry) Chunks() iter.Seq2[int, messages.StreamChunk] { return slices.All(e.chunks) }

// NumChunks returns the number of chunks the entry serves.
func (e Entry) NumChunks() int { return len(e.chunks) }

// Chunk returns chunk i.
func (e Entry) Chunk(i int) messages.StreamChunk { return e.chunks[i] }

// Failure returns the failure of a throw entry.
func (e Entry) Failure() messages.LlmFailure { return e.failure }

// ReadyFile returns the ready file of a hang entry ("" for none).
func (e Entry) ReadyFile() string { return e.readyFile }

// Open reports whether the entry is a recorded chunk group without its
// finish: served, it blocks after its chunks until the call is cancelled,
// as the recorded stream did (the recording's turn was cancelled there, or
// the process crashed). A chunks entry built by the caller or read from an
// override is never open: it serves its chunks and ends, finish or not, as
// the reference's mock adapter does.
func (e Entry) Open() bool {
	if e.kind != KindChunks || !e.recorded {
		return false
	}
	n := len(e.chunks)
	return n == 0 || e.chunks[n-1].Type() != messages.ChunkFinish
}

// Origin returns where a recorded entry comes from, and false for an entry
// that is not from the log (an override, or one built by the caller).
func (e Entry) Origin() (Origin, bool) { return e.origin, e.recorded }
