package synthetic

import (
	"fmt"
	"math"
	"time"
)

// The defaults a zero Config field stands for.
const (
	DefaultName            = "synthetic"
	DefaultModel           = "synthetic-1"
	DefaultTextChunks      = 200
	DefaultReasoningChunks = 50
	DefaultChunkSize       = 4
	DefaultToolCallChunks  = 8
	DefaultMaxToolSteps    = 1
	DefaultMaxToolCalls    = 1
	DefaultToolName        = "synthetic_echo"
	DefaultRetryAfter      = time.Second
)

// maxChunkSize bounds ChunkSize: the pregenerated delta table holds
// piecesPerCorpus pieces of ChunkSize bytes for each of a few indexes, so
// its memory grows with the piece size.
const maxChunkSize = 4096

// maxChunks bounds TextChunks and friends: a block's text is one substring
// of a pregenerated string of about 1.5 × chunks × ChunkSize bytes.
const maxChunks = 1 << 20

// Config configures a synthetic Provider. Every field works at its zero
// value; the comment of each says what zero means. Config is a plain value:
// New copies it.
type Config struct {
	// Seed selects the output. The same seed and the same request history
	// give the same chunks (see Provider).
	Seed int64
	// Name is the provider id (Provider.Name). Default "synthetic".
	Name string
	// Model is the model id the provider reports (Provider.Model). Default
	// "synthetic-1".
	Model string

	// TextChunks is the mean number of deltas in a text block; the actual
	// count of a response is uniform in [TextChunks/2, TextChunks*3/2].
	// Default 200 (the reference's benchmark mix).
	TextChunks int
	// ReasoningChunks is the mean number of deltas in a reasoning block,
	// drawn like TextChunks. Default 50.
	ReasoningChunks int
	// ChunkSize is the number of bytes per text or reasoning delta, and the
	// size of the argument pieces of a tool call. Default 4 (about one
	// token). At most 4096.
	ChunkSize int

	// ReasoningRate is the probability that a response opens with a
	// reasoning block. Default 0. In [0, 1].
	ReasoningRate float64
	// ToolCallRate is the probability that a response ends in tool calls
	// (finish tool-calls, no text block) rather than text (finish stop),
	// while the turn's tool budget (MaxToolSteps) lasts. Default 0. In
	// [0, 1].
	ToolCallRate float64
	// MaxToolSteps is the per-turn tool budget, so that turns terminate: a
	// response never calls a tool once the history ends in MaxToolSteps
	// assistant responses since the last user message that is not a tool
	// result. Default 1: the response after a tool result is plain text.
	MaxToolSteps int
	// MaxToolCalls is the largest number of calls in one tool response; the
	// count is uniform in [1, MaxToolCalls]. Default 1.
	MaxToolCalls int
	// ToolName names the tool called when the request offers no tools (a
	// request that offers tools gets one of them, picked by the seed).
	// Default "synthetic_echo".
	ToolName string

	// FirstTokenLatency is the delay from the call to the first delta.
	// Default 0 (none).
	FirstTokenLatency time.Duration
	// TokensPerSecond paces the deltas (one delta is one token): delta k is
	// due at FirstTokenLatency + k/TokensPerSecond, and the tail (block
	// ends, usage, finish) at FirstTokenLatency + N/TokensPerSecond for N
	// deltas. Default 0: as fast as possible.
	TokensPerSecond float64

	// FailureRate is the probability that an attempt fails. Default 0. In
	// [0, 1]. A retried request (same history) is a new attempt with a new
	// draw, so any rate below 1 lets a retry loop finish.
	FailureRate float64
	// Failures weighs the kinds of failure. The zero FailureMix weighs them
	// equally.
	Failures FailureMix
	// RetryAfter is the providerRetryAfterMs of a RATE_LIMIT failure,
	// rounded up to whole milliseconds. Default 1s.
	RetryAfter time.Duration
}

// FailureMix weighs the failures a synthetic provider injects. Weights are
// relative and non-negative; all zero means equal weights.
type FailureMix struct {
	// RateLimit is an HTTP 429 before any chunk: code RATE_LIMIT, status
	// 429, providerRetryAfterMs from Config.RetryAfter.
	RateLimit float64
	// Server is an HTTP 500 before any chunk: code SERVER, status 500.
	Server float64
	// StreamCut is a stream that breaks after some deltas, without block
	// ends, usage or finish: code STREAM_CLOSED.
	StreamCut float64
}

// Validate reports the first invalid field, naming it. Zero fields are
// valid (they take their defaults).
func (c Config) Validate() error {
	rate := func(name string, v float64) error {
		if math.IsNaN(v) || v < 0 || v > 1 {
			return fmt.Errorf("synthetic: %s %v is not in [0, 1]", name, v)
		}
		return nil
	}
	count := func(name string, v, limit int) error {
		if v < 0 || v > limit {
			return fmt.Errorf("synthetic: %s %d is not in [0, %d]", name, v, limit)
		}
		return nil
	}
	weight := func(name string, v float64) error {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("synthetic: failure weight %s %v is not a finite non-negative number", name, v)
		}
		return nil
	}
	for _, err := range []error{
		count("TextChunks", c.TextChunks, maxChunks),
		count("ReasoningChunks", c.ReasoningChunks, maxChunks),
		count("ChunkSize", c.ChunkSize, maxChunkSize),
		count("MaxToolSteps", c.MaxToolSteps, math.MaxInt32),
		count("MaxToolCalls", c.MaxToolCalls, 1024),
		rate("ReasoningRate", c.ReasoningRate),
		rate("ToolCallRate", c.ToolCallRate),
		rate("FailureRate", c.FailureRate),
		weight("RateLimit", c.Failures.RateLimit),
		weight("Server", c.Failures.Server),
		weight("StreamCut", c.Failures.StreamCut),
	} {
		if err != nil {
			return err
		}
	}
	switch {
	case c.FirstTokenLatency < 0:
		return fmt.Errorf("synthetic: FirstTokenLatency %v is negative", c.FirstTokenLatency)
	case math.IsNaN(c.TokensPerSecond) || math.IsInf(c.TokensPerSecond, 0) || c.TokensPerSecond < 0:
		return fmt.Errorf("synthetic: TokensPerSecond %v is not a finite non-negative number", c.TokensPerSecond)
	case c.RetryAfter < 0:
		return fmt.Errorf("synthetic: RetryAfter %v is negative", c.RetryAfter)
	}
	d := c.withDefaults()
	if n := maxPieces(d); n*d.ChunkSize > maxBlockBytes {
		return fmt.Errorf("synthetic: blocks of up to %d chunks of %d bytes exceed %d bytes", n, d.ChunkSize, maxBlockBytes)
	}
	return nil
}

// maxBlockBytes bounds the longest block, which bounds the pregenerated
// text (about one block plus the corpus).
const maxBlockBytes = 32 << 20

// maxPieces returns the largest number of deltas a text or reasoning block
// of d can have (counts are drawn up to 3/2 of their mean).
func maxPieces(d Config) int { return max(d.TextChunks, d.ReasoningChunks)*3/2 + 1 }

// withDefaults returns c with every zero field set to its default. c must
// be valid.
func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Model == "" {
		c.Model = DefaultModel
	}
	if c.TextChunks == 0 {
		c.TextChunks = DefaultTextChunks
	}
	if c.ReasoningChunks == 0 {
		c.ReasoningChunks = DefaultReasoningChunks
	}
	if c.ChunkSize == 0 {
		c.ChunkSize = DefaultChunkSize
	}
	if c.MaxToolSteps == 0 {
		c.MaxToolSteps = DefaultMaxToolSteps
	}
	if c.MaxToolCalls == 0 {
		c.MaxToolCalls = DefaultMaxToolCalls
	}
	if c.ToolName == "" {
		c.ToolName = DefaultToolName
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	if c.Failures == (FailureMix{}) {
		c.Failures = FailureMix{RateLimit: 1, Server: 1, StreamCut: 1}
	}
	return c
}
