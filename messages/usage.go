package messages

import "fmt"

// OptInt is an optional integer: a value plus whether it is present. The
// zero OptInt is absent.
type OptInt struct {
	v  int64
	ok bool
}

// Some returns a present OptInt.
func Some(v int64) OptInt { return OptInt{v: v, ok: true} }

// Get returns the value and whether it is present.
func (o OptInt) Get() (int64, bool) { return o.v, o.ok }

// Or returns the value, or def when absent.
func (o OptInt) Or(def int64) int64 {
	if o.ok {
		return o.v
	}
	return def
}

// TokenUsage counts the tokens of one model call
// (docs/messages.md#token-usage). The counts
// are disjoint: InputTokens is uncached input only, and billed input is
// InputTokens + CacheReadTokens + CacheWriteTokens. Optional counts remember
// whether the provider reported them, so a recorded usage round-trips.
type TokenUsage struct {
	InputTokens      int64
	OutputTokens     int64
	CacheReadTokens  OptInt
	CacheWriteTokens OptInt
	ReasoningTokens  OptInt
	// TotalTokens is the optional total a later format-0 writer of the
	// reference records beside the counts (docs/log-format.md): kept as
	// reported, never computed.
	TotalTokens OptInt
}

// JSON returns the usage in the harness's shape.
func (u TokenUsage) JSON() JSON {
	var o ObjectBuilder
	o.Int("inputTokens", u.InputTokens).Int("outputTokens", u.OutputTokens)
	if v, ok := u.CacheReadTokens.Get(); ok {
		o.Int("cacheReadTokens", v)
	}
	if v, ok := u.CacheWriteTokens.Get(); ok {
		o.Int("cacheWriteTokens", v)
	}
	if v, ok := u.ReasoningTokens.Get(); ok {
		o.Int("reasoningTokens", v)
	}
	if v, ok := u.TotalTokens.Get(); ok {
		o.Int("totalTokens", v)
	}
	return o.Build()
}

// MarshalJSON implements json.Marshaler.
func (u TokenUsage) MarshalJSON() ([]byte, error) { return u.JSON().MarshalJSON() }

// Add returns the sum of two usages; an optional count is present in the sum
// when present in either.
func (u TokenUsage) Add(o TokenUsage) TokenUsage {
	sum := func(a, b OptInt) OptInt {
		if !a.ok && !b.ok {
			return OptInt{}
		}
		return Some(a.v + b.v)
	}
	return TokenUsage{
		InputTokens:      u.InputTokens + o.InputTokens,
		OutputTokens:     u.OutputTokens + o.OutputTokens,
		CacheReadTokens:  sum(u.CacheReadTokens, o.CacheReadTokens),
		CacheWriteTokens: sum(u.CacheWriteTokens, o.CacheWriteTokens),
		ReasoningTokens:  sum(u.ReasoningTokens, o.ReasoningTokens),
		TotalTokens:      sum(u.TotalTokens, o.TotalTokens),
	}
}

// ParseTokenUsage reads a usage object: inputTokens and outputTokens are
// required non-negative integers, the other counts optional ones.
func ParseTokenUsage(j JSON) (TokenUsage, error) {
	if j.Kind() != KindObject {
		return TokenUsage{}, fmt.Errorf("messages: usage is not an object")
	}
	var u TokenUsage
	count := func(key string, required bool) (OptInt, error) {
		v, ok := j.Field(key)
		if !ok {
			if required {
				return OptInt{}, fmt.Errorf("messages: usage lacks %s", key)
			}
			return OptInt{}, nil
		}
		n, isInt := v.AsInt()
		if !isInt || n < 0 {
			return OptInt{}, fmt.Errorf("messages: usage %s is not a non-negative integer", key)
		}
		return Some(n), nil
	}
	in, err := count("inputTokens", true)
	if err != nil {
		return TokenUsage{}, err
	}
	out, err := count("outputTokens", true)
	if err != nil {
		return TokenUsage{}, err
	}
	u.InputTokens, u.OutputTokens = in.v, out.v
	if u.CacheReadTokens, err = count("cacheReadTokens", false); err != nil {
		return TokenUsage{}, err
	}
	if u.CacheWriteTokens, err = count("cacheWriteTokens", false); err != nil {
		return TokenUsage{}, err
	}
	if u.ReasoningTokens, err = count("reasoningTokens", false); err != nil {
		return TokenUsage{}, err
	}
	if u.TotalTokens, err = count("totalTokens", false); err != nil {
		return TokenUsage{}, err
	}
	return u, nil
}
