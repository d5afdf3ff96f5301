package messages_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

func TestParseTokenUsage(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     messages.TokenUsage
		ok       bool
	}{
		{"required only", `{"inputTokens":10,"outputTokens":5}`, messages.TokenUsage{InputTokens: 10, OutputTokens: 5}, true},
		{"zero cache read stays present", `{"inputTokens":10,"outputTokens":5,"cacheReadTokens":0}`,
			messages.TokenUsage{InputTokens: 10, OutputTokens: 5, CacheReadTokens: messages.Some(0)}, true},
		{"all", `{"inputTokens":1,"outputTokens":2,"cacheReadTokens":3,"cacheWriteTokens":4,"reasoningTokens":5}`,
			messages.TokenUsage{InputTokens: 1, OutputTokens: 2, CacheReadTokens: messages.Some(3),
				CacheWriteTokens: messages.Some(4), ReasoningTokens: messages.Some(5)}, true},
		{"zeros", `{"inputTokens":0,"outputTokens":0,"reasoningTokens":0}`,
			messages.TokenUsage{ReasoningTokens: messages.Some(0)}, true},
		{"missing input", `{"outputTokens":5}`, messages.TokenUsage{}, false},
		{"missing output", `{"inputTokens":5}`, messages.TokenUsage{}, false},
		{"negative", `{"inputTokens":-1,"outputTokens":5}`, messages.TokenUsage{}, false},
		{"fractional", `{"inputTokens":1.5,"outputTokens":5}`, messages.TokenUsage{}, false},
		{"string", `{"inputTokens":"1","outputTokens":5}`, messages.TokenUsage{}, false},
		{"bad optional", `{"inputTokens":1,"outputTokens":5,"cacheWriteTokens":null}`, messages.TokenUsage{}, false},
		{"negative optional", `{"inputTokens":1,"outputTokens":5,"reasoningTokens":-2}`, messages.TokenUsage{}, false},
		{"not an object", `[1,2]`, messages.TokenUsage{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := messages.ParseTokenUsage(messages.MustParseJSON(tc.in))
			require.Equal(t, tc.want, u)
			if !tc.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.in, u.JSON().String(), "optional presence round-trips")
			out, err := u.MarshalJSON()
			require.NoError(t, err)
			require.Equal(t, tc.in, string(out))
		})
	}
}

func TestTokenUsageAdd(t *testing.T) {
	for _, tc := range []struct {
		name    string
		a, b, w messages.TokenUsage
	}{
		{"required", messages.TokenUsage{InputTokens: 1, OutputTokens: 2}, messages.TokenUsage{InputTokens: 10, OutputTokens: 20},
			messages.TokenUsage{InputTokens: 11, OutputTokens: 22}},
		{"optional absent in both stays absent", messages.TokenUsage{}, messages.TokenUsage{}, messages.TokenUsage{}},
		{"optional present in one", messages.TokenUsage{CacheReadTokens: messages.Some(0)}, messages.TokenUsage{},
			messages.TokenUsage{CacheReadTokens: messages.Some(0)}},
		{"optional present in the other", messages.TokenUsage{}, messages.TokenUsage{ReasoningTokens: messages.Some(7)},
			messages.TokenUsage{ReasoningTokens: messages.Some(7)}},
		{"optional present in both", messages.TokenUsage{CacheWriteTokens: messages.Some(3)}, messages.TokenUsage{CacheWriteTokens: messages.Some(4)},
			messages.TokenUsage{CacheWriteTokens: messages.Some(7)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.w, tc.a.Add(tc.b))
			require.Equal(t, tc.w, tc.b.Add(tc.a))
		})
	}
	v, ok := messages.Some(5).Get()
	require.True(t, ok)
	require.Equal(t, int64(5), v)
	_, ok = messages.OptInt{}.Get()
	require.False(t, ok)
	require.Equal(t, int64(9), messages.OptInt{}.Or(9))
	require.Equal(t, int64(5), messages.Some(5).Or(9))
}
