package session

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

func parseEpoch(t testing.TB, text string) EpochHeader {
	t.Helper()
	h, err := parseEpochHeader(messages.MustParseJSON(text))
	require.NoError(t, err, text)
	return h
}

// Scenario 34: the canonical header treats an absent and an empty tool
// list (and system prompt, and adapter-default markers) as the same
// absence.
func TestHeaderCanonicalTreatsAbsentAndEmptyToolsAlike(t *testing.T) {
	const cfg = `"config":{"provider":"deepseek-official","model":"deepseek-v4-flash"}`
	bare := parseEpoch(t, `{`+cfg+`}`)
	for _, text := range []string{
		`{` + cfg + `,"tools":[]}`,
		`{` + cfg + `,"system":""}`,
		`{` + cfg + `,"adapterDefaults":{}}`,
		`{` + cfg + `,"system":"","tools":[],"adapterDefaults":{}}`,
	} {
		h := parseEpoch(t, text)
		require.True(t, h.Equal(bare), text)
		require.True(t, bare.Equal(h), text)
		require.Equal(t, `{`+cfg+`}`, h.JSON().String(), text)
		require.Nil(t, h.Tools())
	}

	built := testEpochHeader("", []messages.ToolSchema{}...)
	require.True(t, built.Equal(bare))
	require.True(t, NewEpochHeader(built.Config, AdapterDefaults{}, "", []messages.ToolSchema{}).Equal(
		NewEpochHeader(built.Config, AdapterDefaults{}, "", nil)))
	require.Nil(t, NewEpochHeader(built.Config, AdapterDefaults{}, "", []messages.ToolSchema{}).Canonical().Tools())
	require.Equal(t, bare.JSON().String(), built.JSON().String())

	tool := messages.ToolSchema{Name: "read", Description: "reads a file", Parameters: messages.MustParseJSON(`{"type":"object"}`)}
	withTool := testEpochHeader("", tool)
	require.False(t, withTool.Equal(bare))
	require.False(t, testEpochHeader("sys").Equal(bare))
	parsedTool := parseEpoch(t, `{`+cfg+`,"tools":[`+tool.JSON().String()+`]}`)
	require.True(t, parsedTool.Equal(withTool))
	require.Equal(t, withTool.JSON().String(), parsedTool.JSON().String())

	// Through a log: a header logged with an empty tool list folds to the
	// canonical form.
	l := newTestLog(t)
	appendOK(t, l, TurnStart{Turn: 1}.Draft())
	appendOK(t, l, NewDraft(TypeRequestHeader, messages.MustParseJSON(`{"header":{`+cfg+`,"tools":[],"system":""},"reason":"initial"}`)))
	got, ok := l.RequestHeader()
	require.True(t, ok)
	require.True(t, got.Equal(bare))
	require.Nil(t, got.Tools())
	require.Equal(t, bare.JSON().String(), got.JSON().String())

	// A typed draft is folded to its canonical form too.
	appendOK(t, l, RequestHeader{Header: NewEpochHeader(built.Config, AdapterDefaults{}, "", []messages.ToolSchema{}), Reason: ReasonChange}.Draft())
	got, _ = l.RequestHeader()
	require.Nil(t, got.Tools())

	// Adapter-default markers are only true, only for present fields.
	for _, bad := range []string{
		`{` + cfg + `,"adapterDefaults":{"maxTokens":true}}`,
		`{` + cfg + `,"adapterDefaults":{"reasoningEffort":false}}`,
		`{"config":{"provider":"p","model":"m","reasoningEffort":"high"},"adapterDefaults":{"temperature":true}}`,
		`{"config":{"provider":"p","model":"m","reasoningEffort":""}}`,
		`{` + cfg + `,"tools":{}}`,
		`{` + cfg + `,"system":1}`,
	} {
		_, err := parseEpochHeader(messages.MustParseJSON(bad))
		require.Error(t, err, bad)
	}
	marked := parseEpoch(t, `{"config":{"provider":"p","model":"m","reasoningEffort":"high","maxTokens":100},"adapterDefaults":{"reasoningEffort":true,"maxTokens":true}}`)
	require.Equal(t, AdapterDefaults{ReasoningEffort: true, MaxTokens: true}, marked.AdapterDefaults)
}

// Scenario 34: the folded header is the latest full snapshot, never a
// merge of deltas.
func TestRequestHeaderTakesLatestSnapshot(t *testing.T) {
	l := newTestLog(t)
	_, ok := l.RequestHeader()
	require.False(t, ok)

	tool := messages.ToolSchema{Name: "read", Parameters: messages.MustParseJSON(`{}`)}
	a := testEpochHeader("first system", tool)
	b := testEpochHeader("") // drops the system prompt and the tools
	appendOK(t, l, TurnStart{Turn: 1}.Draft())
	appendOK(t, l, RequestHeader{Header: a, Reason: ReasonInitial}.Draft())
	appendOK(t, l, RequestContext{Provider: "deepseek-official", Model: "deepseek-v4-flash", ContextWindow: messages.Some(128000)}.Draft())
	got, _ := l.RequestHeader()
	require.True(t, got.Equal(a))

	appendOK(t, l, RequestHeader{Header: b, Reason: ReasonChange}.Draft())
	got, _ = l.RequestHeader()
	require.True(t, got.Equal(b), "the latest snapshot wins, nothing is merged")
	require.Empty(t, got.System)
	require.Nil(t, got.Tools())

	// request/context takes no part in the header.
	appendOK(t, l, RequestContext{Provider: "other", Model: "m"}.Draft())
	got, _ = l.RequestHeader()
	require.True(t, got.Equal(b))
	rc, ok := l.RequestContext()
	require.True(t, ok)
	require.Equal(t, "other", rc.Provider)
	_, has := rc.ContextWindow.Get()
	require.False(t, has)

	appendOK(t, l, RequestHeader{Header: a, Reason: ReasonChange}.Draft())
	endTurn(t, l, 1)
	got, _ = l.RequestHeader()
	require.True(t, got.Equal(a))

	// A restored log folds the same way.
	restored, err := Restore(logHeader("s"), l.Events().Slice())
	require.NoError(t, err)
	got, _ = restored.RequestHeader()
	require.True(t, got.Equal(a))
	require.Equal(t, "first system", got.System)
	require.Len(t, got.Tools(), 1)
}

// Scenario 35: the removed header vocabulary (request/header-delta,
// reason "fallback", mode/set) is refused in seeds and appends.
func TestRejectsLegacyHeaderVocabulary(t *testing.T) {
	const header = `{"config":{"provider":"p","model":"m"}}`
	l := newTestLog(t)
	appendOK(t, l, TurnStart{Turn: 1}.Draft())
	before := stateOf(l)

	cases := []struct {
		name string
		d    Draft
		want string
	}{
		{"header delta", NewDraft("request/header-delta", messages.MustParseJSON(`{"delta":{}}`)), `"request/header-delta" was removed`},
		{"header delta, ignorable", NewDraft("request/header-delta", messages.MustParseJSON(`{"delta":{}}`)).AsIgnorable(), "was removed"},
		{"mode/set", NewDraft("mode/set", messages.MustParseJSON(`{"mode":"plan"}`)), "was removed"},
		{"fallback reason (raw)", NewDraft(TypeRequestHeader, messages.MustParseJSON(`{"header":`+header+`,"reason":"fallback"}`)), `"fallback" was removed`},
		{"fallback reason (typed)", RequestHeader{Header: testEpochHeader(""), Reason: "fallback"}.Draft(), `"fallback" was removed`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Append(tc.d, testNow)
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorContains(t, err, tc.want)
			requireUnchanged(t, l, before)

			seed := append(l.Events().Slice(), tc.d.event(l.Len(), testNow))
			_, err = Restore(logHeader("s"), seed)
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorContains(t, err, tc.want)
			_, err = NewSeeded(logHeader("s"), seed, testNow)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// A header of another format version is refused with an error that says
// which way to go, before its shape is looked at.
func TestParseHeaderRefusesOtherFormatVersions(t *testing.T) {
	cases := []struct {
		line string
		want string
	}{
		{`{"type":"session","version":1,"id":"s","createdAt":0,"delegationDepth":0}`, "upgrade"},
		{`{"type":"session","version":7,"id":"s","brandNewField":true}`, "written by a newer harness"},
		{`{"type":"session","version":-1,"id":"s","createdAt":0,"delegationDepth":0}`, "no upgrade path"},
	}
	for _, tc := range cases {
		_, err := parseHeaderLine([]byte(tc.line))
		var fe *FormatVersionError
		require.ErrorAs(t, err, &fe, tc.line)
		require.ErrorContains(t, err, tc.want)
	}
	_, err := parseHeaderLine([]byte(`{"type":"session","version":1,"id":"s"}`))
	require.NotContains(t, err.Error(), "no upgrade path")

	h, err := parseHeaderLine([]byte(`{"type":"session","version":0,"id":"s","createdAt":0,"cwd":"/w","parentSession":"p","seedLength":3,"origin":"subagent","delegationDepth":1,"agentPreset":"x"}`))
	require.NoError(t, err)
	require.Equal(t, Header{ID: "s", Cwd: "/w", ParentSession: "p", SeedLength: messages.Some(3), Origin: "subagent", DelegationDepth: 1, AgentPreset: "x"}, h)
	require.JSONEq(t, `{"type":"session","version":0,"id":"s","createdAt":0,"cwd":"/w","parentSession":"p","seedLength":3,"origin":"subagent","delegationDepth":1,"agentPreset":"x"}`, h.JSON().String())

	for _, bad := range []string{
		`{"type":"event","version":0,"id":"s","createdAt":0,"delegationDepth":0}`,
		`{"type":"session","version":"0","id":"s","createdAt":0,"delegationDepth":0}`,
		`{"type":"session","version":0,"id":"s","createdAt":0,"delegationDepth":0,"sandboxMode":"x"}`,
		`{"type":"session","version":0,"id":"s","createdAt":0}`,
		`{"type":"session","version":0,"id":"s","createdAt":-1,"delegationDepth":0}`,
		`{"type":"session","version":0,"id":"s","createdAt":0,"delegationDepth":0,"cwd":"relative"}`,
		`{"type":"session","version":0,"id":"s","createdAt":0,"delegationDepth":0,"origin":"cli"}`,
		`[1]`,
	} {
		_, err := parseHeaderLine([]byte(bad))
		require.Error(t, err, bad)
		var fe *FormatVersionError
		require.False(t, errors.As(err, &fe), bad)
	}
}
