package agent

import (
	"github.com/dshgo/dsh/messages"
)

// messageOverhead is the estimator's fixed cost of a message (role and
// framing).
const messageOverhead = 8

// estimateMessageTokens is the default token estimator: 8 per message
// plus ceil(n/4), where n counts the bytes of the model-visible text of
// its blocks (text and reasoning text, a tool call's name and arguments,
// a tool result's nested blocks; 256 for an image). It reproduces the
// shadowedTokenCount the reference recorded in the compaction fixture.
func estimateMessageTokens(m messages.Message) int {
	n := 0
	for b := range m.Blocks() {
		n += blockBytes(b)
	}
	return messageOverhead + (n+3)/4
}

func blockBytes(b messages.ContentBlock) int {
	switch b.Type() {
	case messages.BlockText, messages.BlockReasoning:
		return len(b.Text())
	case messages.BlockToolCall:
		return len(b.Name()) + len(b.Arguments())
	case messages.BlockToolResult:
		n := 0
		for c := range b.NestedBlocks() {
			n += blockBytes(c)
		}
		return n
	case messages.BlockImage:
		return 1024
	}
	return b.JSON().Len()
}

// estimate returns the estimated tokens of the messages; the error is
// EstimateTokens's panic.
func (d *driver) estimate(msgs []messages.Message) (n int, err error) {
	defer recoverCallback("estimate-tokens", &err)
	for _, m := range msgs {
		if !m.IsZero() {
			n += d.comp.EstimateTokens(m)
		}
	}
	return n, nil
}

// tokensOf estimates one message; the error is EstimateTokens's panic.
func (d *driver) tokensOf(m messages.Message) (n int, err error) {
	defer recoverCallback("estimate-tokens", &err)
	return d.comp.EstimateTokens(m), nil
}

// compactionRange picks the shadowed prefix of the surface: everything
// before the most recent tail holding RetainRatio of the estimated tokens,
// with the edge moved back (retaining more) until no tool call is cut
// from its results. It returns the nodes, their messages and tokens; the
// error is EstimateTokens's panic.
func (d *driver) compactionRange() (nodes []int64, msgs []messages.Message, tokens int, err error) {
	defer recoverCallback("estimate-tokens", &err)
	all := d.mirror.SurfaceNodes()
	ms := make([]messages.Message, len(all))
	toks := make([]int, len(all))
	total := 0
	for i, s := range all {
		ms[i] = d.surfaceMessage(s)
		if !ms[i].IsZero() {
			toks[i] = d.comp.EstimateTokens(ms[i])
		}
		total += toks[i]
	}
	budget := int(float64(total) * d.comp.RetainRatio)
	cut, kept := len(all), 0
	for cut > 0 && kept+toks[cut-1] <= budget {
		cut--
		kept += toks[cut]
	}
	for cut > 0 && !balancedCut(ms, cut) {
		cut--
	}
	for i := range cut {
		tokens += toks[i]
		if !ms[i].IsZero() {
			msgs = append(msgs, ms[i])
		}
	}
	return all[:cut], msgs, tokens, nil
}

// balancedCut reports whether the prefix ms[:cut] answers every tool call
// it makes and the suffix answers none of the prefix's calls.
func balancedCut(ms []messages.Message, cut int) bool {
	open := map[string]bool{}
	for _, m := range ms[:cut] {
		for b := range m.Blocks() {
			switch b.Type() {
			case messages.BlockToolCall:
				open[b.ID()] = true
			case messages.BlockToolResult:
				delete(open, b.ToolCallID())
			}
		}
	}
	if len(open) > 0 {
		return false
	}
	// A result in the suffix whose call is in the prefix would cross too;
	// the prefix answered all of its calls, so only a result without a
	// call in the suffix could: check the suffix's results have calls there.
	calls := map[string]bool{}
	for _, m := range ms[cut:] {
		for b := range m.Blocks() {
			switch b.Type() {
			case messages.BlockToolCall:
				calls[b.ID()] = true
			case messages.BlockToolResult:
				if !calls[b.ToolCallID()] {
					return false
				}
			}
		}
	}
	return true
}
