package session

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/internal/fixtures"
	"github.com/dshgo/dsh/messages"
)

// Scenario 12: a log seeded with another log's events derives the same
// messages; the seed gets a session/end-seed, and the live part starts
// after the seed.
func TestReplaysIdenticallyFromSeededEventLog(t *testing.T) {
	orig := sampleLog(t)
	seed := orig.Events().Slice()

	seeded, err := NewSeeded(logHeader("session-replay"), seed, testNow)
	require.NoError(t, err)

	requireSameMessages(t, orig.DeriveMessages().Slice(), seeded.DeriveMessages().Slice())
	require.Equal(t, orig.SurfaceNodes(), seeded.SurfaceNodes())
	require.Equal(t, orig.Len()+1, seeded.Len())
	require.Equal(t, orig.Len(), seeded.FirstLiveSeq())
	requireSameEvents(t, seed, seeded.Events().Slice()[:len(seed)])
	last, _ := seeded.Last()
	require.Equal(t, TypeEndSeed, last.Type())
	require.Equal(t, orig.Len(), last.Seq())
	require.Equal(t, testNow, last.Time())
	require.Equal(t, "{}", last.Data().String())

	wantHeader, _ := orig.RequestHeader()
	gotHeader, ok := seeded.RequestHeader()
	require.True(t, ok)
	require.True(t, wantHeader.Equal(gotHeader))

	// Restore replays without appending anything.
	restored, err := Restore(logHeader("session-replay"), seed)
	require.NoError(t, err)
	require.Equal(t, orig.Len(), restored.Len())
	require.Equal(t, orig.Len(), restored.FirstLiveSeq())
	requireSameMessages(t, orig.DeriveMessages().Slice(), restored.DeriveMessages().Slice())
	require.NoError(t, CheckTrace(seeded.Events().Slice()))
}

// Scenario 13: an empty seed is marked with session/end-seed at seq 0; a
// fresh session is not; reopening an untouched seeded log adds no second
// marker.
func TestMarksExplicitlyEmptySeedWithoutMarkingFreshSession(t *testing.T) {
	empty, err := NewSeeded(logHeader("session-empty"), []Event{}, testNow)
	require.NoError(t, err)
	require.Equal(t, int64(1), empty.Len())
	require.Equal(t, int64(0), empty.FirstLiveSeq())
	e, _ := empty.Event(0)
	require.Equal(t, TypeEndSeed, e.Type())
	require.Equal(t, int64(0), e.Seq())

	nilSeed, err := NewSeeded(logHeader("session-nil"), nil, testNow)
	require.NoError(t, err)
	require.Equal(t, int64(1), nilSeed.Len())

	fresh := newTestLog(t)
	require.Equal(t, int64(0), fresh.Len())
	require.Equal(t, 0, fresh.Events().Len())

	reopened, err := NewSeeded(logHeader("session-empty"), empty.Events().Slice(), testNow+1)
	require.NoError(t, err)
	require.Equal(t, int64(1), reopened.Len(), "reopening added a second end-seed")
	require.Equal(t, int64(1), reopened.FirstLiveSeq())

	// Once the session has moved on, a reopen marks the new seed end.
	appendOK(t, reopened, UserMessage{Message: userText(t, "more")}.Draft())
	again, err := NewSeeded(logHeader("session-empty"), reopened.Events().Slice(), testNow+2)
	require.NoError(t, err)
	require.Equal(t, int64(3), again.Len())
	last, _ := again.Last()
	require.Equal(t, TypeEndSeed, last.Type())
}

// Scenario 14: a request/header without provider/model and an assistant
// message without an identity are refused on a seed, a load and an
// append.
func TestRejectsPreProviderRequestHeadersAndAssistantMessagesOnSeed(t *testing.T) {
	cases := []struct {
		name string
		typ  EventType
		data string
		want string
	}{
		{"header without provider", TypeRequestHeader,
			`{"header":{"config":{"model":"deepseek-chat"}},"reason":"initial"}`, "lacks provider/model"},
		{"header with empty model", TypeRequestHeader,
			`{"header":{"config":{"provider":"deepseek","model":""}},"reason":"initial"}`, "lacks provider/model"},
		{"header without config", TypeRequestHeader, `{"header":{},"reason":"initial"}`, "lacks provider/model"},
		{"assistant message without id", TypeAssistantMessage,
			`{"turn":1,"step":1,"message":{"role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}}`,
			"lacks an identified message"},
		{"assistant message with empty id", TypeAssistantMessage,
			`{"turn":1,"step":1,"message":{"id":"","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}}`,
			"lacks an identified message"},
		{"assistant message with pre-provider source", TypeAssistantMessage,
			`{"turn":1,"step":1,"message":{"id":"m1","role":"assistant","content":[],"source":{"kind":"model","model":"m"}}}`,
			"lacks provider/model"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Restore(logHeader("s"), []Event{seedEvent(tc.typ, 0, tc.data)})
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorContains(t, err, tc.want)
			var ee *EventError
			require.ErrorAs(t, err, &ee)
			require.Equal(t, int64(0), ee.Seq)
			require.Equal(t, tc.typ, ee.Type)

			_, err = NewSeeded(logHeader("s"), []Event{seedEvent(tc.typ, 0, tc.data)}, testNow)
			require.ErrorContains(t, err, tc.want)

			line := `{"type":"` + string(tc.typ) + `","seq":0,"time":0,"data":` + tc.data + `}`
			// A load refuses it too, whether the decoder or the log checks.
			e, err := DecodeEvent([]byte(line))
			if err == nil {
				_, err = Restore(logHeader("s"), []Event{e})
			}
			require.ErrorContains(t, err, tc.want)

			l := newTestLog(t)
			_, err = l.Append(NewDraft(tc.typ, messages.MustParseJSON(tc.data)), testNow)
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, int64(0), l.Len())
		})
	}
}

// Scenario 15: data that is not lossless JSON cannot become event data
// (messages.JSON refuses it), and a draft without data is refused with
// the log unchanged.
func TestRejectsNonJSONEventData(t *testing.T) {
	for _, text := range []string{`[1,,2]`, `-0`, `NaN`, `{"a":1,"a":2}`, `1e400`, `[1,2`, ``} {
		_, err := messages.ParseJSONString(text)
		require.ErrorIs(t, err, messages.ErrNotJSON, "%q", text)
	}

	l := sampleLog(t)
	before := stateOf(l)
	for _, typ := range []EventType{TypeTodoWrite, TypeUserMessage, "session/title", TypeEndSeed} {
		d := NewDraft(typ, messages.JSON{})
		if typ.IsSurface() {
			d = d.WithSurface(AppendOp())
		}
		_, err := l.Append(d, testNow)
		require.ErrorIs(t, err, ErrInvalid, "%s", typ)
		require.ErrorContains(t, err, "no data")
		requireUnchanged(t, l, before)
	}
	// The zero message has no JSON either.
	_, err := l.Append(UserMessage{}.Draft(), testNow)
	require.ErrorIs(t, err, ErrInvalid)
	requireUnchanged(t, l, before)
}

// Scenario 16: a surface type appended without a surfaceOp is refused.
func TestRejectsSurfaceAppendWithoutSurfaceOp(t *testing.T) {
	l := newTestLog(t)
	s := beginTurn(t, l, "hi")
	appendOK(t, l, StepStart{Turn: s.Turn, Step: 1}.Draft())
	before := stateOf(l)

	m := userText(t, "no marker")
	for name, d := range map[string]Draft{
		"raw user message":   NewDraft(TypeUserMessage, m.JSON()),
		"typed user message": UserMessage{Message: m}.Draft().WithSurface(SurfaceOp{}),
		"assistant message":  AssistantMessage{Turn: s.Turn, Step: 1, Message: assistantOf(t, messages.TextBlock("x"))}.Draft().WithSurface(SurfaceOp{}),
		"tool result":        ToolResult{Turn: s.Turn, Step: 1, Message: toolResultOf("c", "x")}.Draft().WithSurface(SurfaceOp{}),
	} {
		_, err := l.Append(d, testNow)
		require.ErrorIs(t, err, ErrInvalid, name)
		require.ErrorContains(t, err, "surfaceOp", name)
		requireUnchanged(t, l, before)
	}
}

// Scenario 17: a seed must be contiguous from 0.
func TestRejectsNonContiguousSeed(t *testing.T) {
	events := sampleLog(t).Events().Slice()
	for name, seed := range map[string][]Event{
		"gap":           append(append([]Event{}, events[:3]...), events[4:]...),
		"starts at one": events[1:],
		"repeats a seq": append(append([]Event{}, events[:3]...), events[2:]...),
	} {
		_, err := Restore(logHeader("s"), seed)
		require.ErrorIs(t, err, ErrInvalid, name)
		require.ErrorContains(t, err, "contiguous from 0", name)
		_, err = NewSeeded(logHeader("s"), seed, testNow)
		require.ErrorContains(t, err, "contiguous from 0", name)
	}
}

// Scenario 18: surface metadata on a log-only event is refused, on an
// append and in a seed.
func TestRejectsSurfaceMetadataOnNonSurfaceAppendAndSeedEvents(t *testing.T) {
	l := newTestLog(t)
	s := beginTurn(t, l, "hi")
	before := stateOf(l)
	for name, d := range map[string]Draft{
		"surfaceOp append":  StepStart{Turn: s.Turn, Step: 1}.Draft().WithSurface(AppendOp()),
		"surfaceOp replace": NewTodoWrite(nil).Draft().WithSurface(ReplaceOp(s.User, s.User)),
		"sourceEventSeqs":   StepStart{Turn: s.Turn, Step: 1}.Draft().WithSources([]int64{0}),
		"empty sources":     NewTodoWrite(nil).Draft().WithSources([]int64{}),
		"foreign type":      NewDraft("session/title", messages.MustParseJSON(`{"title":"t"}`)).WithSurface(AppendOp()),
	} {
		_, err := l.Append(d, testNow)
		require.ErrorIs(t, err, ErrInvalid, name)
		require.ErrorContains(t, err, "non-surface", name)
		requireUnchanged(t, l, before)
	}

	events := sampleLog(t).Events().Slice()
	withOp := append([]Event{}, events...)
	withOp[0].setOp(AppendOp()) // turn/start
	_, err := Restore(logHeader("s"), withOp)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "non-surface")

	withSources := append([]Event{}, events...)
	withSources[2].setSources([]int64{1}, true) // step/start
	_, err = NewSeeded(logHeader("s"), withSources, testNow)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "non-surface")
}

// Scenario 19: event and message views are snapshots: they do not grow
// when the log does.
func TestEventViewsDoNotGrowAfterAppend(t *testing.T) {
	l := sampleLog(t)
	n := l.Len()
	all, from, msgs := l.Events(), l.EventsFrom(2), l.DeriveMessages()
	first := all.At(0)

	appendTextTurn(t, l, "again", "sure")

	require.Equal(t, int(n), all.Len())
	require.Equal(t, int(n)-2, from.Len())
	require.Greater(t, l.Events().Len(), all.Len())
	require.Greater(t, l.DeriveMessages().Len(), msgs.Len())
	require.True(t, first.Equal(all.At(0)))
	count := 0
	for range all.All() {
		count++
	}
	require.Equal(t, int(n), count)
	// A second view of the same length shares nothing a holder can clobber.
	s := all.Slice()
	s[0] = Event{}
	require.False(t, all.At(0).IsZero())
	require.Equal(t, 0, l.EventsFrom(l.Len()+5).Len())
}

// Scenario 21: todo/write is a log-only event: it yields no derived
// message and no surface node.
func TestTodoWriteIsNotASurfaceEvent(t *testing.T) {
	l := newTestLog(t)
	s := beginTurn(t, l, "plan it")
	before := stateOf(l)
	todos := []Todo{{Content: "read", Status: "completed"}, {Content: "write", Status: "in_progress"}}
	e := appendOK(t, l, NewTodoWrite(todos).Draft())

	require.False(t, TypeTodoWrite.IsSurface())
	require.Equal(t, OpNone, e.SurfaceOp().Kind())
	require.Equal(t, before.nodes, l.SurfaceNodes())
	requireSameMessages(t, before.msgs, l.DeriveMessages().Slice())
	require.JSONEq(t, `{"todos":[{"content":"read","status":"completed"},{"content":"write","status":"in_progress"}]}`, e.Data().String())
	p, ok := e.Payload().(TodoWrite)
	require.True(t, ok)
	require.Equal(t, todos, p.Todos())
	_, ok = e.Message()
	require.False(t, ok)
	endTurn(t, l, s.Turn)
}

// Bad input is refused with ErrInvalid (or *UnsupportedTypeError) and
// leaves the log exactly as it was.
func TestBadAppendLeavesLogUnchanged(t *testing.T) {
	l := newTestLog(t)
	appendTextTurn(t, l, "hello", "hi there")
	lastResult := appendToolTurn(t, l, "call-1").Result
	s := beginTurn(t, l, "open")
	appendOK(t, l, StepStart{Turn: s.Turn, Step: 1}.Draft())
	nodes := l.SurfaceNodes()

	mismatched, err := messages.ImportMessage(messages.MustParseJSON(
		`{"id":"r1","role":"user","source":{"kind":"tool","callId":"a"},"content":[{"type":"tool-result","toolCallId":"b","content":[],"isError":false}]}`))
	require.NoError(t, err)
	twoBlocks, err := messages.ImportMessage(messages.MustParseJSON(
		`{"id":"r2","role":"user","source":{"kind":"tool","callId":"a"},"content":[{"type":"tool-result","toolCallId":"a","content":[]},{"type":"text","text":"x"}]}`))
	require.NoError(t, err)
	userSourced, err := messages.ImportMessage(messages.MustParseJSON(
		`{"id":"a1","role":"assistant","source":{"kind":"user"},"content":[]}`))
	require.NoError(t, err)
	turn, step := s.Turn, int64(1)

	cases := []struct {
		name        string
		d           Draft
		unsupported bool
		want        string
	}{
		{name: "missing surfaceOp on a surface type", d: UserMessage{Message: userText(t, "x")}.Draft().WithSurface(SurfaceOp{}), want: "lacks its surfaceOp"},
		{name: "stray surfaceOp on a log-only type", d: NewTodoWrite(nil).Draft().WithSurface(AppendOp()), want: "non-surface"},
		{name: "stray sourceEventSeqs on a log-only type", d: StepEnd{Turn: turn, Step: step}.Draft().WithSources([]int64{1}), want: "non-surface"},
		{name: "replace naming a non-surface seq", d: UserMessage{Message: userText(t, "x")}.Draft().WithSurface(ReplaceOp(0, 0)), want: "not a current surface node"},
		{name: "replace naming a future seq", d: UserMessage{Message: userText(t, "x")}.Draft().WithSurface(ReplaceOp(s.User, 999)), want: "not a current surface node"},
		{name: "sources citing the event itself", d: UserMessage{Message: userText(t, "x")}.Draft().WithSources([]int64{l.Len()}), want: "not an earlier seq"},
		{name: "sources repeating a seq", d: UserMessage{Message: userText(t, "x")}.Draft().WithSources([]int64{1, 1}), want: "repeats"},
		{name: "replace sources omitting a shadowed node", d: UserMessage{Message: userText(t, "x")}.Draft().WithSurface(ReplaceOp(nodes[0], nodes[1])).WithSources([]int64{nodes[0]}), want: "omits shadowed node"},
		{name: "unknown non-ignorable type", d: NewDraft("team/unheard-of", messages.MustParseJSON(`{}`)), unsupported: true},
		{name: "legacy type even when ignorable", d: NewDraft("mode/set", messages.MustParseJSON(`{}`)).AsIgnorable(), want: "removed from the format"},
		{name: "no type", d: NewDraft("", messages.MustParseJSON(`{}`)), want: "no type"},
		{name: "turn/start without turn", d: NewDraft(TypeTurnStart, messages.MustParseJSON(`{}`)), want: `"turn"`},
		{name: "turn/start with fractional turn", d: NewDraft(TypeTurnStart, messages.MustParseJSON(`{"turn":1.5}`)), want: `"turn"`},
		{name: "turn/start legacy trigger", d: NewDraft(TypeTurnStart, messages.MustParseJSON(`{"turn":3,"trigger":{"kind":"message"}}`)), want: "trigger"},
		{name: "core data not an object", d: NewDraft(TypeStepEnd, messages.MustParseJSON(`[1]`)), want: "not an object"},
		{name: "turn/end with unknown reason", d: NewDraft(TypeTurnEnd, messages.MustParseJSON(`{"turn":3,"reason":{"kind":"refusal"}}`)), want: "unknown"},
		{name: "tool/result answering another call (typed draft)", d: ToolResult{Turn: turn, Step: step, Message: mismatched}.Draft(), want: "answers"},
		{name: "tool/result answering another call (raw draft)", d: NewDraft(TypeToolResult, messages.MustParseJSON(`{"turn":3,"step":1,"message":`+mismatched.JSON().String()+`}`)).WithSurface(AppendOp()), want: "answers"},
		{name: "tool/result with two blocks", d: ToolResult{Turn: turn, Step: step, Message: twoBlocks}.Draft(), want: "exactly one tool-result block"},
		{name: "tool/result with a user message", d: ToolResult{Turn: turn, Step: step, Message: userText(t, "x")}.Draft(), want: "tool source"},
		{name: "assistant/message with a user role (typed draft)", d: AssistantMessage{Turn: turn, Step: step, Message: userText(t, "x")}.Draft(), want: "want assistant"},
		{name: "assistant/message with a user role (raw draft)", d: NewDraft(TypeAssistantMessage, messages.MustParseJSON(`{"turn":3,"step":1,"message":`+userText(t, "x").JSON().String()+`}`)).WithSurface(AppendOp()), want: "want assistant"},
		{name: "assistant/message without a model source", d: AssistantMessage{Turn: turn, Step: step, Message: userSourced}.Draft(), want: "model source"},
		{name: "user/message with an assistant role", d: UserMessage{Message: assistantOf(t, messages.TextBlock("x"))}.Draft(), want: "want user"},
		{name: "assistant/message interrupted false", d: NewDraft(TypeAssistantMessage, messages.MustParseJSON(`{"turn":3,"step":1,"interrupted":false,"message":`+assistantOf(t).JSON().String()+`}`)).WithSurface(AppendOp()), want: "interrupted"},
		{name: "tool-result replace of a user message", d: ToolResult{Turn: turn, Step: step, Message: toolResultOf("call-1", "x")}.Draft().WithSurface(ReplaceOp(s.User, s.User)), want: "not a tool/result"},
		{name: "tool-result replace changing the call", d: ToolResult{Turn: 2, Step: 1, Message: toolResultOf("call-1", "x")}.Draft().WithSurface(ReplaceOp(lastResult, lastResult)), want: "changes more than the result content"},
		{name: "request/header reason fallback", d: RequestHeader{Header: testEpochHeader("s"), Reason: "fallback"}.Draft(), want: "fallback"},
		{name: "request/header unknown reason", d: RequestHeader{Header: testEpochHeader("s"), Reason: "later"}.Draft(), want: "later"},
		{name: "inbox splice bad target", d: NewInboxSpliced("now", 0, messages.OptInt{}, nil, "").Draft(), want: "target"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := stateOf(l)
			_, err := l.Append(tc.d, testNow)
			require.Error(t, err)
			require.ErrorIs(t, err, ErrInvalid)
			var ut *UnsupportedTypeError
			require.Equal(t, tc.unsupported, errors.As(err, &ut), "%v", err)
			if tc.unsupported {
				require.Equal(t, EventType("team/unheard-of"), ut.Type)
				require.Equal(t, before.n, ut.Seq)
			} else {
				var ee *EventError
				require.ErrorAs(t, err, &ee)
				require.Equal(t, before.n, ee.Seq)
			}
			require.ErrorContains(t, err, tc.want)
			requireUnchanged(t, l, before)
		})
	}

	// The log still takes good events after all of that.
	appendOK(t, l, StepEnd{Turn: turn, Step: step}.Draft())
	endTurn(t, l, turn)
	require.NoError(t, CheckTrace(l.Events().Slice()))
}

// An unknown type marked ignorable is accepted and kept verbatim as a
// log-only event; an unknown type in a seed is refused unless ignorable.
func TestKeepsUnknownIgnorableEvents(t *testing.T) {
	l := sampleLog(t)
	before := stateOf(l)
	data := messages.MustParseJSON(`{"z":1,"a":[true,null],"nested":{"k":"v"}}`)
	e := appendOK(t, l, NewDraft("plugin/from-the-future", data).AsIgnorable())

	require.True(t, e.Ignorable())
	require.Equal(t, before.n, e.Seq())
	require.Equal(t, data.String(), e.Data().String())
	require.Nil(t, e.Payload())
	require.Equal(t, before.nodes, l.SurfaceNodes())
	requireSameMessages(t, before.msgs, l.DeriveMessages().Slice())

	// Known foreign types need no marker and are kept verbatim too.
	title := appendOK(t, l, NewDraft("session/title", messages.MustParseJSON(`{"title":"t","messageSeqs":[1]}`)))
	require.True(t, title.Type().IsForeign())
	require.Nil(t, title.Payload())

	seed := l.Events().Slice()
	restored, err := Restore(logHeader("s"), seed)
	require.NoError(t, err)
	requireSameEvents(t, seed, restored.Events().Slice())

	seed[e.Seq()].flags &^= flagIgnorable
	_, err = Restore(logHeader("s"), seed)
	var ut *UnsupportedTypeError
	require.ErrorAs(t, err, &ut)
	require.Equal(t, e.Seq(), ut.Seq)
	require.ErrorContains(t, err, "plugin/from-the-future")
}

// Values handed to and out of the log are copies: mutating them after the
// fact never changes the log.
func TestValuesAreImmutableFromOutside(t *testing.T) {
	l := newTestLog(t)
	s := beginTurn(t, l, "hi")

	// Slices passed in are copied.
	sources := []int64{s.User}
	d := UserMessage{Message: userText(t, "cites")}.Draft().WithSources(sources)
	sources[0] = 0
	e := appendOK(t, l, d)
	got, ok := e.SourceEventSeqs()
	require.True(t, ok)
	require.Equal(t, []int64{s.User}, got)

	inserted := []messages.Message{userText(t, "queued")}
	want := inserted[0]
	splice := NewInboxSpliced("next-turn", 0, messages.Some(0), inserted, "")
	inserted[0] = userText(t, "clobbered")
	spliced := appendOK(t, l, splice.Draft())
	require.True(t, splice.Inserted()[0].Equal(want))
	sp := spliced.Payload().(InboxSpliced)
	require.True(t, sp.Inserted()[0].Equal(want))

	todos := []Todo{{Content: "a", Status: "pending"}}
	tw := NewTodoWrite(todos)
	todos[0].Status = "completed"
	todoEvent := appendOK(t, l, tw.Draft())
	require.Equal(t, "pending", tw.Todos()[0].Status)
	require.JSONEq(t, `{"todos":[{"content":"a","status":"pending"}]}`, todoEvent.Data().String())

	tools := []messages.ToolSchema{{Name: "read", Description: "reads", Parameters: messages.MustParseJSON(`{"type":"object"}`)}}
	h := testEpochHeader("sys", tools...)
	hs := NewEpochHeader(h.Config, AdapterDefaults{}, "sys", tools)
	tools[0].Name = "clobbered"
	require.Equal(t, "read", hs.Tools()[0].Name)
	appendOK(t, l, StepStart{Turn: s.Turn, Step: 1}.Draft())
	appendOK(t, l, RequestHeader{Header: hs, Reason: ReasonInitial}.Draft())
	appendOK(t, l, AssistantMessage{Turn: s.Turn, Step: 1, Message: assistantOf(t, messages.TextBlock("ok"))}.Draft())
	appendOK(t, l, StepEnd{Turn: s.Turn, Step: 1}.Draft())
	endTurn(t, l, s.Turn)

	// Slices handed out are copies.
	before := stateOf(l)
	beforeHeader, _ := l.RequestHeader()
	headerJSON := beforeHeader.JSON().String()

	got[0] = 999
	again, _ := l.Event(e.Seq())
	src, _ := again.SourceEventSeqs()
	require.Equal(t, []int64{s.User}, src)

	ins := sp.Inserted()
	ins[0] = messages.Message{}
	sp2 := mustEvent(t, l, spliced.Seq()).Payload().(InboxSpliced)
	require.True(t, sp2.Inserted()[0].Equal(want))

	td := mustEvent(t, l, todoEvent.Seq()).Payload().(TodoWrite).Todos()
	td[0].Content = "clobbered"
	require.Equal(t, "a", mustEvent(t, l, todoEvent.Seq()).Payload().(TodoWrite).Todos()[0].Content)

	ht := beforeHeader.Tools()
	ht[0] = messages.ToolSchema{Name: "clobbered"}
	h2, _ := l.RequestHeader()
	require.Equal(t, headerJSON, h2.JSON().String())

	evs := l.Events().Slice()
	evs[0] = Event{}
	msgs := l.DeriveMessages().Slice()
	msgs[0] = messages.Message{}
	nodes := l.SurfaceNodes()
	nodes[0] = 12345
	view := l.DeriveMessages()
	viewCopy := view.Slice()
	viewCopy[0] = messages.Message{}

	requireUnchanged(t, l, before)
	require.False(t, view.At(0).IsZero())
	h3, _ := l.RequestHeader()
	require.Equal(t, headerJSON, h3.JSON().String())
	require.NoError(t, CheckTrace(l.Events().Slice()))
}

func mustEvent(t testing.TB, l *Log, seq int64) Event {
	t.Helper()
	e, ok := l.Event(seq)
	require.True(t, ok, "no event at seq %d", seq)
	return e
}

// A row tag is refused as the type of an event not marked ignorable. An
// ignorable one is a foreign event the SQLite format holds (the
// reference's own databases have one): the log takes it, and a JSONL log
// refuses to be written with it, since its reader would take the line for
// a malformed row.
func TestRefusesRowTagsAsEventTypes(t *testing.T) {
	l, err := New(Header{ID: "s", CreatedAt: 1})
	require.NoError(t, err)
	for _, tag := range []EventType{"text-chunks", "reasoning-chunks", "tool-call-chunks"} {
		_, err := l.Append(NewDraft(tag, messages.MustParseJSON(`{}`)), 1)
		require.ErrorIs(t, err, ErrInvalid)
		require.ErrorContains(t, err, "reserved for packed chunk rows")
	}
	require.Equal(t, int64(0), l.Len())
	for _, tag := range []EventType{"text-chunks", "reasoning-chunks", "tool-call-chunks"} {
		_, err := l.Append(NewDraft(tag, messages.MustParseJSON(`{}`)).AsIgnorable(), 1)
		require.NoError(t, err)
	}
	require.Equal(t, int64(3), l.Len())
	err = CheckJSONL(l.Events().Slice())
	require.ErrorIs(t, err, ErrNotJSONL)
	require.ErrorContains(t, err, `seq 0 has type "text-chunks"`)
	for _, zstd := range []bool{false, true} {
		err = WriteFile(filepath.Join(t.TempDir(), "session.jsonl"), l.Header(), l.Events().Slice(), WriteOptions{Zstd: zstd})
		require.ErrorIs(t, err, ErrNotJSONL)
	}
}

func TestMirrorCommitsAnotherLogsEventsAsTheyAre(t *testing.T) {
	src, err := New(Header{ID: "src", CreatedAt: 1})
	require.NoError(t, err)
	m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("hi")}, messages.UserSource())
	require.NoError(t, err)
	for _, d := range []Draft{UserMessage{Message: m}.Draft(), TurnStart{Turn: 1}.Draft(), StepStart{Turn: 1, Step: 1}.Draft(),
		AssistantChunk{Turn: 1, Step: 1, Chunk: messages.TextDeltaChunk(0, "x")}.Draft()} {
		_, err := src.Append(d, 42)
		require.NoError(t, err)
	}
	dst, err := New(Header{ID: "dst", CreatedAt: 1})
	require.NoError(t, err)
	for e := range src.Events().All() {
		require.NoError(t, dst.Mirror(e))
	}
	require.Equal(t, src.Len(), dst.Len())
	for i := range src.Len() {
		a, _ := src.Event(i)
		b, _ := dst.Event(i)
		require.True(t, a.Equal(b))
	}
	require.Equal(t, 1, dst.DeriveMessages().Len())

	// Out of order, or breaking a rule, changes nothing.
	e, _ := src.Event(0)
	require.ErrorIs(t, dst.Mirror(e), ErrInvalid)
	other, err := New(Header{ID: "o", CreatedAt: 1})
	require.NoError(t, err)
	bad, _ := src.Event(2) // step/start outside a turn at seq 0: seq mismatch
	require.Error(t, other.Mirror(bad))
	require.Zero(t, other.Len())
}

// TestValidateAgreesWithRestore: Validate accepts what Restore restores
// and refuses what it refuses, with the same error, over the interop
// corpus and over every log of it damaged in three ways at many places
// (an event dropped, leaving a seq gap; dropped and the rest renumbered,
// breaking citations, replaces and the turn structure; one event's data
// swapped for the next one's of another type).
func TestValidateAgreesWithRestore(t *testing.T) {
	_, paths := fixtureFiles(t)
	refused := 0
	check := func(h Header, events []Event) {
		t.Helper()
		_, rerr := Restore(h, events)
		verr := Validate(h, events)
		require.Equal(t, errText(rerr), errText(verr))
		if rerr != nil {
			refused++
		}
	}
	damagedCorpus(t, paths, func(h Header, events []Event, _ damage) { check(h, events) })
	require.Greater(t, refused, 100, "the damaged logs exercise the refusals")
}

// damage says how damagedCorpus changed a corpus log.
type damage int

const (
	intact     damage = iota
	gap               // an event dropped, leaving a seq gap
	renumbered        // an event dropped and the rest renumbered
	swapped           // one event's data swapped for the next one's, of another type
)

// damagedCorpus calls fn with each log of paths as it is, and then, at
// about a dozen places in it, damaged each way damage lists.
func damagedCorpus(t *testing.T, paths []string, fn func(h Header, events []Event, d damage)) {
	t.Helper()
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		f, err := ParseFile(fixtures.Substitute(raw), path)
		require.NoError(t, err)
		fn(f.Header, f.Events, intact)
		step := max(len(f.Events)/12, 1)
		for k := 0; k < len(f.Events); k += step {
			dropped := append(slices.Clone(f.Events[:k]), f.Events[k+1:]...)
			fn(f.Header, dropped, gap)
			renumber := slices.Clone(dropped)
			for i := k; i < len(renumber); i++ {
				renumber[i].seq = int64(i)
			}
			fn(f.Header, renumber, renumbered)
			if k+1 < len(f.Events) && f.Events[k].typ != f.Events[k+1].typ {
				swap := slices.Clone(f.Events)
				swap[k].data, swap[k].payload = f.Events[k+1].fullData(), nil
				swap[k].flags &^= flagChunkText | flagDataFromPayload
				fn(f.Header, swap, swapped)
			}
		}
	}
}

// MirrorAt over the views a session hands out shares that session's pages
// instead of copying its events (the agent's mirror of its log held a
// second copy of every event): the mirror's full pages are the source's
// and its tail is the source's tail, borrowed. A mirrored event that the
// source does not hold is stored in a copy of the tail, which leaves the
// source's untouched.
func TestMirrorAtSharesTheSourcesPages(t *testing.T) {
	src, err := New(Header{ID: "src", CreatedAt: 1})
	require.NoError(t, err)
	dst, err := New(Header{ID: "src", CreatedAt: 1})
	require.NoError(t, err)
	batches := [][]Draft{{TurnStart{Turn: 1}.Draft(), StepStart{Turn: 1, Step: 1}.Draft()}}
	for b := range 40 { // batches of 1 to 13 chunks: views start anywhere in a page
		var ds []Draft
		for i := range b%13 + 1 {
			ds = append(ds, AssistantChunk{Turn: 1, Step: 1, Chunk: messages.TextDeltaChunk(0, strconv.Itoa(b)+"."+strconv.Itoa(i))}.Draft())
		}
		batches = append(batches, ds)
	}
	for _, ds := range batches {
		from := src.Len()
		require.NoError(t, src.appendBatch(ds, 7))
		v := src.EventsFrom(from)
		for i := range v.Len() {
			require.NoError(t, dst.MirrorAt(v, i))
		}
	}
	require.Greater(t, src.Len(), int64(2*pageSize), "several pages")
	require.Equal(t, src.Len(), dst.Len())
	for i := range src.Len() {
		a, _ := src.Event(i)
		b, _ := dst.Event(i)
		require.True(t, a.Equal(b), "event %d", i)
	}
	require.Equal(t, len(src.events.full), len(dst.events.full))
	for k := range src.events.full {
		require.Same(t, src.events.full[k], dst.events.full[k], "full page %d is shared", k)
	}
	require.NotEmpty(t, dst.events.tail)
	require.Same(t, &src.events.tail[0], &dst.events.tail[0], "the tail is shared")
	require.True(t, dst.events.borrowed)

	// An event of another log mirrored next is the mirror's own: the
	// tail is copied first, and the source's next append is its own.
	n := src.Len()
	other, err := New(Header{ID: "src", CreatedAt: 1})
	require.NoError(t, err)
	for e := range src.Events().All() {
		require.NoError(t, other.Mirror(e))
	}
	_, err = other.Append(AssistantChunk{Turn: 1, Step: 1, Chunk: messages.TextDeltaChunk(0, "other")}.Draft(), 8)
	require.NoError(t, err)
	require.NoError(t, dst.MirrorAt(EventsOf(other.EventsFrom(n).Slice()), 0)) // a copy: not shareable
	require.False(t, dst.events.borrowed)
	_, err = src.Append(AssistantChunk{Turn: 1, Step: 1, Chunk: messages.TextDeltaChunk(0, "src")}.Draft(), 9)
	require.NoError(t, err)
	mine, _ := dst.Event(n)
	theirs, _ := src.Event(n)
	require.Contains(t, mine.Data().String(), `"other"`)
	require.Contains(t, theirs.Data().String(), `"src"`)
	for i := range n {
		a, _ := src.Event(i)
		b, _ := dst.Event(i)
		require.True(t, a.Equal(b), "event %d", i)
	}

	// A log whose last event is not the view's event before is not
	// shared with.
	cp, err := Restore(src.Header(), src.Events().Slice()[:n])
	require.NoError(t, err)
	require.NoError(t, cp.MirrorAt(src.EventsFrom(n), 0))
	require.Same(t, src.events.full[0], cp.events.full[0], "the same events: shared")
	cp, err = Restore(src.Header(), other.Events().Slice()[:n-1])
	require.NoError(t, err)
	_, err = cp.Append(AssistantChunk{Turn: 1, Step: 1, Chunk: messages.TextDeltaChunk(0, "cp")}.Draft(), 7)
	require.NoError(t, err)
	require.NoError(t, cp.MirrorAt(src.EventsFrom(n), 0))
	require.NotSame(t, src.events.full[0], cp.events.full[0], "another last event: copied")
	last, _ := cp.Event(n - 1)
	require.Contains(t, last.Data().String(), `"cp"`)
}

// TestAdoptAgreesWithRestore: over the corpus and the damaged logs of
// TestValidateAgreesWithRestore, Adopt and AdoptSeeded refuse what
// Restore and NewSeeded refuse, with the same error, and build the same
// log otherwise (events, surface, derived messages), which then takes
// appends the same way.
func TestAdoptAgreesWithRestore(t *testing.T) {
	_, paths := fixtureFiles(t)
	refused, built := 0, 0
	check := func(h Header, events []Event) {
		t.Helper()
		want, rerr := Restore(h, events)
		got, aerr := Adopt(h, slices.Clone(events))
		require.Equal(t, errText(rerr), errText(aerr))
		wantSeeded, serr := NewSeeded(h, events, testNow)
		gotSeeded, aserr := AdoptSeeded(h, slices.Clone(events), testNow)
		require.Equal(t, errText(serr), errText(aserr))
		if rerr != nil {
			refused++
			return
		}
		built++
		for _, pair := range [][2]*Log{{want, got}, {wantSeeded, gotSeeded}} {
			want, got := pair[0], pair[1]
			if want == nil {
				require.Nil(t, got)
				continue
			}
			require.Equal(t, want.FirstLiveSeq(), got.FirstLiveSeq())
			require.Equal(t, want.SurfaceNodes(), got.SurfaceNodes())
			requireSameEvents(t, want.Events().Slice(), got.Events().Slice())
			requireSameMessages(t, want.DeriveMessages().Slice(), got.DeriveMessages().Slice())
		}
		if wantSeeded == nil {
			return
		}
		// Appends after the adopted events: past the last full page of the
		// adopted array, into the tail and the pages after it.
		for range pageSize + 3 {
			d := TurnStart{Turn: int64(wantSeeded.Len())}.Draft()
			_, werr := wantSeeded.Append(d, testNow)
			_, gerr := gotSeeded.Append(d, testNow)
			require.Equal(t, errText(werr), errText(gerr))
			if werr != nil {
				break
			}
		}
		requireSameEvents(t, wantSeeded.Events().Slice(), gotSeeded.Events().Slice())
	}
	damagedCorpus(t, paths, func(h Header, events []Event, d damage) {
		if d == intact || d == renumbered {
			check(h, events)
		}
	})
	require.Greater(t, refused, 10, "the damaged logs exercise the refusals")
	require.Greater(t, built, 10)
}

// TestAdoptKeepsTheEventsInPlace: an adopted slice's full pages are the
// log's, not copies, and appends after them go to the log's own tail,
// never into the adopted array.
func TestAdoptKeepsTheEventsInPlace(t *testing.T) {
	src := chunkLog(t, 3*pageSize+5)
	events := src.Events().Slice()
	n := len(events)
	l, err := Adopt(src.Header(), events)
	require.NoError(t, err)
	require.EqualValues(t, n, l.Len())
	full := n / pageSize * pageSize
	for i := range full {
		require.Samef(t, &events[i], l.events.at(i), "event %d was copied", i)
	}
	for i := full; i < n; i++ {
		require.NotSame(t, &events[i], l.events.at(i), "the tail is the log's own")
		require.Zero(t, events[i], "the adopted array keeps nothing past its pages")
	}
	before := l.Events()
	_, err = l.Append(AssistantChunk{Turn: 1, Step: 1, Chunk: messages.TextDeltaChunk(0, "more")}.Draft(), testNow)
	require.NoError(t, err)
	require.EqualValues(t, n+1, l.Len())
	require.Equal(t, n, before.Len(), "a view taken before the append does not see it")
	requireSameEvents(t, src.Events().Slice(), l.EventsFrom(0).View(0, n).Slice())
}
