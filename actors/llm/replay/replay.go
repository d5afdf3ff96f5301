package replay

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// DefaultName is the provider name when Options.Name is empty.
const DefaultName = "replay"

// Options configures a replay Provider. The zero Options is valid.
type Options struct {
	// Name is the provider id (Provider.Name). Default "replay". A replay
	// that must reproduce recorded model sources sets the recorded
	// provider's name here.
	Name string
	// OverridePath is the override file FromFile applies. Empty means
	// replay.override.json beside the log file, applied if it exists; a
	// path given here must exist.
	OverridePath string
	// NoOverride makes FromFile ignore any override file.
	NoOverride bool
	// ReadyDir is the directory a relative hang readyFile is created in.
	// Empty means the process's working directory (the reference's ACP
	// tests resolve it against the agent's cwd).
	ReadyDir string
}

// Provider serves a script of stream calls in call order: the k-th call
// to Stream (counted from 0) gets entry k, whatever its request. It is safe
// for concurrent use; concurrent calls are numbered in the order their
// Stream calls happen.
type Provider struct {
	name     string
	readyDir string
	entries  []Entry // never modified after New
	next     atomic.Int64
}

var _ llm.Provider = (*Provider)(nil)

// New returns a provider serving entries (the slice is copied).
func New(entries []Entry, opts Options) *Provider {
	name := opts.Name
	if name == "" {
		name = DefaultName
	}
	return &Provider{name: name, readyDir: opts.ReadyDir, entries: slices.Clone(entries)}
}

// FromEvents returns a provider serving the recorded script of a session
// log (Script) with the overrides applied in order, and default Options.
// The events are read, not retained.
func FromEvents(events []session.Event, overrides ...Override) (*Provider, error) {
	script, err := Script(events)
	if err != nil {
		return nil, err
	}
	for _, o := range overrides {
		if script, err = o.Apply(script); err != nil {
			return nil, err
		}
	}
	return New(script, Options{}), nil
}

// FromFile reads the session log at path (plain or zstd; a torn tail is
// dropped as session.ReadFile drops it) and returns a provider serving its
// recorded script, with the override file applied (see
// Options.OverridePath).
func FromFile(path string, opts Options) (*Provider, error) {
	f, err := session.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	script, err := Script(f.Events)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	if !opts.NoOverride {
		op := opts.OverridePath
		if op == "" {
			op = filepath.Join(filepath.Dir(path), OverrideFileName)
			if _, err := os.Stat(op); errors.Is(err, fs.ErrNotExist) {
				op = ""
			}
		}
		if op != "" {
			o, err := ReadOverride(op)
			if err != nil {
				return nil, err
			}
			if script, err = o.Apply(script); err != nil {
				return nil, fmt.Errorf("%w (%s)", err, op)
			}
		}
	}
	return New(script, opts), nil
}

// Name returns Options.Name.
func (p *Provider) Name() string { return p.name }

// NextCall returns the number of Stream calls so far, which is the entry
// the next call will get.
func (p *Provider) NextCall() int { return int(p.next.Load()) }

// Len returns the number of scripted calls.
func (p *Provider) Len() int { return len(p.entries) }

// Entry returns scripted call k.
func (p *Provider) Entry(k int) Entry { return p.entries[k] }

// Entries iterates the script.
func (p *Provider) Entries() iter.Seq2[int, Entry] { return slices.All(p.entries) }

// Stream claims the next call number k when it is called (not when the
// iterator is first ranged over) and serves entry k: its chunks; then, for
// a throw entry, its failure as an error; for a hang entry or an open
// recorded group, a wait until ctx is done. A cancelled call yields one
// messages.LlmFailure with code ABORTED and ends. A call beyond the script
// yields a failure with code UNKNOWN, "replay: no recorded stream for call
// k". The request is not looked at.
func (p *Provider) Stream(ctx context.Context, _ llm.Request) iter.Seq2[messages.StreamChunk, error] {
	k := int(p.next.Add(1) - 1)
	return func(yield func(messages.StreamChunk, error) bool) {
		if k >= len(p.entries) {
			yield(messages.StreamChunk{}, messages.LlmFailure{
				Message: fmt.Sprintf("replay: no recorded stream for call %d", k), Code: llm.CodeUnknown,
			})
			return
		}
		p.serve(ctx, p.entries[k], yield)
	}
}

func (p *Provider) serve(ctx context.Context, e Entry, yield func(messages.StreamChunk, error) bool) {
	done := ctx.Done()
	for _, c := range e.chunks {
		select {
		case <-done:
			yield(messages.StreamChunk{}, aborted(ctx))
			return
		default:
		}
		if !yield(c, nil) {
			return
		}
	}
	switch {
	case e.kind == KindThrow:
		if ctx.Err() != nil {
			yield(messages.StreamChunk{}, aborted(ctx))
			return
		}
		yield(messages.StreamChunk{}, e.failure)
	case e.kind == KindHang:
		if e.readyFile != "" {
			path := e.readyFile
			if !filepath.IsAbs(path) && p.readyDir != "" {
				path = filepath.Join(p.readyDir, path)
			}
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				yield(messages.StreamChunk{}, messages.LlmFailure{
					Message: fmt.Sprintf("replay: create ready file: %v", err), Code: llm.CodeUnknown,
				})
				return
			}
		}
		<-done
		yield(messages.StreamChunk{}, aborted(ctx))
	case e.Open():
		<-done
		yield(messages.StreamChunk{}, aborted(ctx))
	}
}

// aborted is the failure of a cancelled call. The runtime maps a cancelled
// call to an aborted finish whatever the provider says; the code says it
// too for a consumer reading the provider directly.
func aborted(ctx context.Context) messages.LlmFailure {
	return messages.LlmFailure{Message: "replay: call cancelled: " + context.Cause(ctx).Error(), Code: llm.CodeAborted}
}
