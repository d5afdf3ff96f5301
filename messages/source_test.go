package messages_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

func mustSource(t *testing.T, s string) messages.Source {
	t.Helper()
	src, err := messages.ParseSource(messages.MustParseJSON(s))
	require.NoError(t, err)
	return src
}

func TestSourceConstructors(t *testing.T) {
	plugin, err := messages.PluginSource("@x/snap", messages.MustParseJSON(`{"form":"snapshot","sections":[{"name":"a","text":"b"}]}`))
	require.NoError(t, err)
	bare, err := messages.PluginSource("compact", messages.JSON{})
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		src  messages.Source
		want string
	}{
		{"user", messages.UserSource(), `{"kind":"user"}`},
		{"tool", messages.ToolSource("call-9"), `{"kind":"tool","callId":"call-9"}`},
		{"plugin", plugin, `{"kind":"plugin","plugin":"@x/snap","form":"snapshot","sections":[{"name":"a","text":"b"}]}`},
		{"bare plugin", bare, `{"kind":"plugin","plugin":"compact"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.src.JSON().String())
			p, err := messages.ParseSource(tc.src.JSON())
			require.NoError(t, err)
			require.Equal(t, tc.src, p)
			out, err := tc.src.MarshalJSON()
			require.NoError(t, err)
			require.Equal(t, tc.want, string(out))
		})
	}
	require.Equal(t, "@x/snap", plugin.Plugin())
	form, ok := plugin.Field("form")
	require.True(t, ok)
	require.Equal(t, `"snapshot"`, form.String())

	for name, extra := range map[string]messages.JSON{
		"extra repeats kind":   messages.MustParseJSON(`{"kind":"user"}`),
		"extra repeats plugin": messages.MustParseJSON(`{"plugin":"other"}`),
		"extra not an object":  messages.MustParseJSON(`["form"]`),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := messages.PluginSource("p", extra)
			require.Error(t, err)
		})
	}
	_, err = messages.PluginSource("", messages.JSON{})
	require.Error(t, err)
	require.True(t, messages.Source{}.IsZero())
}

func TestParseSource(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		ok       bool
		check    func(t *testing.T, s messages.Source)
	}{
		{"user", `{"kind":"user"}`, true, func(t *testing.T, s messages.Source) {
			require.Equal(t, messages.SourceUser, s.Kind())
		}},
		{"plugin", `{"kind":"plugin","plugin":"compact","compactionId":"c1"}`, true, func(t *testing.T, s messages.Source) {
			require.Equal(t, messages.SourcePlugin, s.Kind())
			require.Equal(t, "compact", s.Plugin())
			v, ok := s.Field("compactionId")
			require.True(t, ok)
			require.Equal(t, `"c1"`, v.String())
		}},
		{"model", `{"kind":"model","provider":"deepseek","model":"deepseek-chat"}`, true, func(t *testing.T, s messages.Source) {
			require.Equal(t, "deepseek", s.Provider())
			require.Equal(t, "deepseek-chat", s.Model())
			require.True(t, s.ReplayState().IsZero())
		}},
		{"model with replay state", `{"kind":"model","provider":"p","model":"m","replayState":{"response":1.0}}`, true, func(t *testing.T, s messages.Source) {
			require.Equal(t, `{"response":1.0}`, s.ReplayState().String())
		}},
		{"tool", `{"kind":"tool","callId":"c"}`, true, func(t *testing.T, s messages.Source) {
			require.Equal(t, "c", s.CallID())
		}},
		{"unknown kind kept verbatim", `{"kind":"subagent-settled","agentId":"a","result":{"x":[1,2]}}`, true, func(t *testing.T, s messages.Source) {
			require.Equal(t, messages.SourceKind("subagent-settled"), s.Kind())
			v, ok := s.Field("result")
			require.True(t, ok)
			require.Equal(t, `{"x":[1,2]}`, v.String())
		}},
		{"member order kept", `{"plugin":"p","kind":"plugin"}`, true, nil},

		{"not an object", `"user"`, false, nil},
		{"no kind", `{"provider":"p"}`, false, nil},
		{"empty kind", `{"kind":""}`, false, nil},
		{"kind not a string", `{"kind":1}`, false, nil},
		{"model without provider", `{"kind":"model","model":"m"}`, false, nil},
		{"model with empty provider", `{"kind":"model","provider":"","model":"m"}`, false, nil},
		{"model without model", `{"kind":"model","provider":"p"}`, false, nil},
		{"tool without callId", `{"kind":"tool"}`, false, nil},
		{"tool callId not a string", `{"kind":"tool","callId":7}`, false, nil},
		{"plugin without plugin", `{"kind":"plugin","form":"notice"}`, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := messages.ParseSource(messages.MustParseJSON(tc.in))
			if !tc.ok {
				require.Error(t, err)
				require.True(t, s.IsZero())
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.in, s.JSON().String())
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}
