package agent

import (
	"fmt"
	"slices"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// pruneToolResults is the tool-result pruner (docs/agent-loop.md#compaction):
// each oversized tool result of c's shadowed span is replaced, content only,
// by a placeholder; each replace is preceded by its compaction/prune, in one
// atomic append. Only inside a turn. Once they are committed, c's span,
// messages and tokens are those of the pruned surface, and next runs.
func (d *driver) pruneToolResults(c *compaction, next func()) {
	bound := d.comp.PruneToolResultBytes
	if bound <= 0 || !c.hasTurn {
		// A tool/result replace belongs inside a turn (the trace
		// invariant): a manual compaction between turns does not prune.
		next()
		return
	}
	idx := slices.Index(d.mirror.SurfaceNodes(), c.nodes[0])
	pruned := false
	for _, seq := range c.nodes {
		drafts, ok, err := d.pruneDrafts(seq, bound)
		if err != nil {
			// The prunes already issued stay (they are durable anyway).
			c.fault = err
			d.endCompaction(CompactFailed, err.Error())
			return
		}
		if ok {
			d.appendDrafts(appendTag{}, drafts...)
			pruned = true
		}
	}
	if !pruned || idx < 0 {
		next()
		return
	}
	d.settle(func() {
		all := d.mirror.SurfaceNodes()
		if idx+len(c.nodes) > len(all) {
			d.endCompaction(CompactFailed, "the surface changed during the compaction")
			return
		}
		c.nodes = slices.Clone(all[idx : idx+len(c.nodes)])
		c.msgs, c.tokens = nil, 0
		for _, s := range c.nodes {
			if m := d.surfaceMessage(s); !m.IsZero() {
				c.msgs = append(c.msgs, m)
			}
		}
		n, err := d.estimate(c.msgs)
		if err != nil {
			c.fault = err
			d.endCompaction(CompactFailed, err.Error())
			return
		}
		c.tokens = n
		next()
	})
}

// pruneDrafts returns compaction/prune and the content-only tool/result
// replace of surface node seq, when it is a tool result over bound bytes
// whose event dsh can rewrite without changing anything but the content.
// The error is EstimateTokens's panic.
func (d *driver) pruneDrafts(seq int64, bound int) ([]session.Draft, bool, error) {
	e, ok := d.mirror.Event(seq)
	if !ok {
		return nil, false, nil
	}
	p, ok := e.Payload().(session.ToolResult)
	if !ok || p.Message.NumBlocks() != 1 {
		return nil, false, nil
	}
	b := p.Message.Block(0)
	n := blockBytes(b)
	if b.Type() != messages.BlockToolResult || n <= bound || !p.Draft().Data().Equal(e.Data()) {
		return nil, false, nil
	}
	nb, err := b.WithNestedContent([]messages.ContentBlock{messages.TextBlock(fmt.Sprintf(prunedToolResultText, n))})
	if err != nil {
		return nil, false, nil
	}
	np := p
	np.Message = p.Message.WithContent([]messages.ContentBlock{nb})
	seqs, err := messages.MarshalValue([]int64{seq})
	if err != nil {
		return nil, false, nil
	}
	tokens, err := d.tokensOf(p.Message)
	if err != nil {
		return nil, false, err
	}
	var rng, o messages.ObjectBuilder
	rng.Int("start", seq).Int("end", seq)
	o.Raw("shadowedRange", rng.Build()).Raw("shadowedSeqs", seqs).Int("shadowedTokenCount", int64(tokens))
	return []session.Draft{
		session.NewDraft(session.TypeCompactionPrune, o.Build()),
		np.Draft().WithSurface(session.ReplaceOp(seq, seq)).WithSources([]int64{seq}),
	}, true, nil
}
