package messages_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

func TestParseCallConfig(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     messages.CallConfig
		ok       bool
	}{
		{"minimal", `{"provider":"deepseek","model":"deepseek-chat"}`,
			messages.CallConfig{Provider: "deepseek", Model: "deepseek-chat"}, true},
		{"full", `{"provider":"p","model":"m","reasoningEffort":"high","temperature":0.7,"maxTokens":4096,"stop":["a","\n"]}`,
			messages.CallConfig{Provider: "p", Model: "m", ReasoningEffort: "high", Temperature: messages.SomeFloat(0.7),
				MaxTokens: messages.Some(4096)}.WithStop("a", "\n"), true},
		{"empty stop list stays present", `{"provider":"p","model":"m","stop":[]}`,
			messages.CallConfig{Provider: "p", Model: "m"}.WithStop([]string{}...), true},
		{"temperature zero", `{"provider":"p","model":"m","temperature":0}`,
			messages.CallConfig{Provider: "p", Model: "m", Temperature: messages.SomeFloat(0)}, true},
		{"missing provider", `{"model":"m"}`, messages.CallConfig{}, false},
		{"empty model", `{"provider":"p","model":""}`, messages.CallConfig{}, false},
		{"empty reasoningEffort", `{"provider":"p","model":"m","reasoningEffort":""}`, messages.CallConfig{}, false},
		{"temperature string", `{"provider":"p","model":"m","temperature":"0.7"}`, messages.CallConfig{}, false},
		{"maxTokens fractional", `{"provider":"p","model":"m","maxTokens":1.5}`, messages.CallConfig{}, false},
		{"maxTokens zero", `{"provider":"p","model":"m","maxTokens":0}`, messages.CallConfig{}, false},
		{"maxTokens negative", `{"provider":"p","model":"m","maxTokens":-1}`, messages.CallConfig{}, false},
		{"stop not an array", `{"provider":"p","model":"m","stop":"x"}`, messages.CallConfig{}, false},
		{"stop holds a number", `{"provider":"p","model":"m","stop":["x",1]}`, messages.CallConfig{}, false},
		{"not an object", `"p"`, messages.CallConfig{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := messages.ParseCallConfig(messages.MustParseJSON(tc.in))
			if !tc.ok {
				require.Error(t, err)
				require.True(t, c.Equal(messages.CallConfig{}))
				return
			}
			require.NoError(t, err)
			require.NoError(t, c.Validate())
			require.True(t, c.Equal(tc.want), "got %s", c.JSON())
			require.Equal(t, tc.in, c.JSON().String())
		})
	}
}

func TestCallConfigEqual(t *testing.T) {
	base := messages.CallConfig{Provider: "p", Model: "m"}
	for _, tc := range []struct {
		name string
		a, b messages.CallConfig
		want bool
	}{
		{"same", base, base, true},
		{"provider", base, messages.CallConfig{Provider: "q", Model: "m"}, false},
		{"model", base, messages.CallConfig{Provider: "p", Model: "n"}, false},
		{"effort", base, messages.CallConfig{Provider: "p", Model: "m", ReasoningEffort: "low"}, false},
		{"temperature presence", base, messages.CallConfig{Provider: "p", Model: "m", Temperature: messages.SomeFloat(0)}, false},
		{"temperature value", messages.CallConfig{Temperature: messages.SomeFloat(0.5)}, messages.CallConfig{Temperature: messages.SomeFloat(0.6)}, false},
		{"maxTokens presence", base, messages.CallConfig{Provider: "p", Model: "m", MaxTokens: messages.Some(0)}, false},
		{"stop equal", base.WithStop("a", "b"), base.WithStop("a", "b"), true},
		{"stop order", base.WithStop("a", "b"), base.WithStop("b", "a"), false},
		{"stop length", base.WithStop("a"), base.WithStop("a", "b"), false},
		{"stop absent vs empty", base, base.WithStop([]string{}...), false},
		{"stop absent vs no args", base, base.WithStop(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.a.Equal(tc.b))
			require.Equal(t, tc.want, tc.b.Equal(tc.a))
		})
	}
}

func TestCallConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    messages.CallConfig
		ok   bool
	}{
		{"ok", messages.CallConfig{Provider: "p", Model: "m", Temperature: messages.SomeFloat(1), MaxTokens: messages.Some(1)}, true},
		{"no provider", messages.CallConfig{Model: "m"}, false},
		{"no model", messages.CallConfig{Provider: "p"}, false},
		{"NaN temperature", messages.CallConfig{Provider: "p", Model: "m", Temperature: messages.SomeFloat(math.NaN())}, false},
		{"infinite temperature", messages.CallConfig{Provider: "p", Model: "m", Temperature: messages.SomeFloat(math.Inf(1))}, false},
		{"zero maxTokens", messages.CallConfig{Provider: "p", Model: "m", MaxTokens: messages.Some(0)}, false},
	} {
		err := tc.c.Validate()
		if tc.ok {
			require.NoError(t, err, tc.name)
		} else {
			require.Error(t, err, tc.name)
		}
	}
	v, ok := messages.SomeFloat(0.25).Get()
	require.True(t, ok)
	require.Equal(t, 0.25, v)
	_, ok = messages.OptFloat{}.Get()
	require.False(t, ok)
}

func TestParseToolSchema(t *testing.T) {
	for _, tc := range []struct {
		name, in, out string
		ok            bool
	}{
		{"full", `{"name":"bash","description":"run","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}`, "", true},
		{"no parameters", `{"name":"t","description":"d"}`, `{"name":"t","description":"d","parameters":{}}`, true},
		{"no description", `{"name":"t","parameters":{}}`, `{"name":"t","description":"","parameters":{}}`, true},
		{"no name", `{"description":"d","parameters":{}}`, "", false},
		{"empty name", `{"name":"","parameters":{}}`, "", false},
		{"parameters not an object", `{"name":"t","description":"d","parameters":[]}`, "", false},
		{"description not a string", `{"name":"t","description":7}`, "", false},
		{"not an object", `"bash"`, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := messages.ParseToolSchema(messages.MustParseJSON(tc.in))
			if !tc.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			want := tc.out
			if want == "" {
				want = tc.in
			}
			require.Equal(t, want, s.JSON().String())
		})
	}
}
