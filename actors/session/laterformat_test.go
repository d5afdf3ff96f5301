package session

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

// laterLog is a format-0 log in the shapes of the reference's releases
// after the corpus (docs/log-format.md): the three new log-only types, a
// "series" request header with startsSeries, totalTokens in usage,
// originalDimensions on an image, origin on permission/preset, and an
// assistant message citing its stream as a range.
const laterLog = `{"type":"session","version":0,"id":"s-later","createdAt":0,"delegationDepth":0}
{"type":"model/selection","seq":0,"time":1,"data":{"provider":"deepseek-official","model":"deepseek-v4-flash","source":"user"}}
{"type":"subagent/model-selection-policy","seq":1,"time":1,"data":{"policy":"inherit"}}
{"type":"permission/preset","seq":2,"time":1,"data":{"preset":"auto","origin":"cli"}}
{"type":"turn/start","seq":3,"time":1,"data":{"turn":1}}
{"type":"step/start","seq":4,"time":1,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":5,"time":1,"data":{"id":"u1","role":"user","content":[{"type":"text","text":"look"},{"type":"image","attachment":{"attachmentId":"sha256:ab","mediaType":"image/png","bytes":69,"originalDimensions":{"width":4000,"height":3000}}}],"source":{"kind":"user"}},"surfaceOp":"append"}
{"type":"session-log-deepseek/delivery-accepted","seq":6,"time":1,"data":{"messageId":"u1"}}
{"type":"request/header","seq":7,"time":1,"data":{"header":{"config":{"provider":"deepseek-official","model":"deepseek-v4-flash"},"system":"sys"},"reason":"series","startsSeries":true}}
{"type":"assistant/chunk","seq":8,"time":1,"data":{"turn":1,"step":1,"chunk":{"type":"block-start","index":0,"blockType":"text"}}}
{"type":"assistant/chunk","seq":9,"time":1,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"a "}}}
{"type":"assistant/chunk","seq":10,"time":1,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"cat"}}}
{"type":"assistant/chunk","seq":11,"time":1,"data":{"turn":1,"step":1,"chunk":{"type":"block-end","index":0,"block":{"type":"text","text":"a cat"}}}}
{"type":"assistant/chunk","seq":12,"time":1,"data":{"turn":1,"step":1,"chunk":{"type":"usage","usage":{"inputTokens":10,"outputTokens":2,"totalTokens":12}}}}
{"type":"assistant/message","seq":13,"time":1,"data":{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","content":[{"type":"text","text":"a cat"}],"source":{"kind":"model","provider":"deepseek-official","model":"deepseek-v4-flash"}},"usage":{"inputTokens":10,"outputTokens":2,"totalTokens":12}},"surfaceOp":"append","sourceEventSeqs":[[8,12]]}
{"type":"step/end","seq":14,"time":1,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":15,"time":1,"data":{"turn":1,"reason":{"kind":"completed"}}}
`

// TestLaterFormatZeroLoads: a log with every later format-0 addition reads,
// restores and derives the right events and messages.
func TestLaterFormatZeroLoads(t *testing.T) {
	f, err := ParseFile([]byte(laterLog), "session.jsonl")
	require.NoError(t, err)
	require.Nil(t, f.Torn)
	l, err := f.Log()
	require.NoError(t, err)
	require.EqualValues(t, 16, l.Len())

	for _, typ := range []EventType{"model/selection", "subagent/model-selection-policy", "session-log-deepseek/delivery-accepted"} {
		require.True(t, typ.IsForeign(), typ)
	}
	sel, _ := l.Event(0)
	require.Equal(t, EventType("model/selection"), sel.Type())
	require.Equal(t, `{"provider":"deepseek-official","model":"deepseek-v4-flash","source":"user"}`, sel.Data().String())
	preset, _ := l.Event(2)
	origin, ok := preset.Data().Field("origin")
	require.True(t, ok)
	require.Equal(t, `"cli"`, origin.String())

	hdr, _ := l.Event(7)
	rh := hdr.Payload().(RequestHeader)
	require.Equal(t, ReasonSeries, rh.Reason)
	require.True(t, rh.StartsSeries)
	folded, ok := l.RequestHeader()
	require.True(t, ok)
	require.Equal(t, "sys", folded.System)
	// dsh writes the same shape back.
	require.Equal(t, hdr.Data().String(), rh.Draft().Data().String())

	am, _ := l.Event(13)
	src, ok := am.SourceEventSeqs()
	require.True(t, ok)
	require.Equal(t, []int64{8, 9, 10, 11, 12}, src)
	pl := am.Payload().(AssistantMessage)
	total, ok := pl.Usage.TotalTokens.Get()
	require.True(t, ok)
	require.EqualValues(t, 12, total)
	require.JSONEq(t, `{"inputTokens":10,"outputTokens":2,"totalTokens":12}`, pl.Usage.JSON().String())

	msgs := l.DeriveMessages().Slice()
	require.Len(t, msgs, 2)
	img := msgs[0].Block(1)
	require.Equal(t, messages.BlockImage, img.Type())
	dims, ok := img.Attachment().Field("originalDimensions")
	require.True(t, ok)
	require.Equal(t, `{"width":4000,"height":3000}`, dims.String())
	require.Equal(t, "a cat", msgs[1].Block(0).Text())
}

// TestSourceRangesExpand: ranges and seqs mix; a range stands for every seq
// in it.
func TestSourceRangesExpand(t *testing.T) {
	for _, c := range []struct {
		list string
		want []int64
	}{
		{`[[12,16]]`, []int64{12, 13, 14, 15, 16}},
		{`[1,[3,5],7]`, []int64{1, 3, 4, 5, 7}},
		{`[[0,1],[2,4]]`, []int64{0, 1, 2, 3, 4}},
		{`[30,40,[3,5]]`, []int64{30, 40, 3, 4, 5}}, // a compaction's citations: start, summary, shadowed
	} {
		e, err := DecodeEvent([]byte(`{"type":"assistant/message","seq":50,"time":0,"data":{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}},"surfaceOp":"append","sourceEventSeqs":` + c.list + `}`))
		require.NoError(t, err, c.list)
		got, _ := e.SourceEventSeqs()
		require.Equal(t, c.want, got, c.list)
	}
}

// TestBadSourceRangesRefused: a range that is not an increasing pair of
// earlier seqs, or that overlaps a neighbour, is refused; so is an
// expansion past the bound.
func TestBadSourceRangesRefused(t *testing.T) {
	for _, list := range []string{
		`[[5,5]]`, `[[6,5]]`, `[[1]]`, `[[1,2,3]]`, `[[]]`, `[[-1,2]]`, `[[1,"2"]]`, `[[1,2.5]]`,
		`[[1,3],3]`, `[2,[2,4]]`, `[[1,5],[4,8]]`, `[[1,5],[5,8]]`, `[[4,9],5]`,
		`[[1,50]]`, `[[40,60]]`, `[[[1,2]]]`,
	} {
		_, err := DecodeEvent([]byte(`{"type":"assistant/message","seq":50,"time":0,"data":{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}},"surfaceOp":"append","sourceEventSeqs":` + list + `}`))
		require.Error(t, err, list)
		require.Contains(t, err.Error(), "sourceEventSeqs", list)
	}
	// A short line cannot expand without bound.
	_, err := DecodeEvent([]byte(`{"type":"assistant/message","seq":9007199254740991,"time":0,"data":{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}},"surfaceOp":"append","sourceEventSeqs":[[0,9007199254740990]]}`))
	require.ErrorContains(t, err, "expand to more than")
}

// TestSourceRangesBoundedOverAFile: many short lines each citing as much as
// one event may cannot add up past the file's bound: the reader refuses
// the line that crosses it (corruption when a turn/end follows).
func TestSourceRangesBoundedOverAFile(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"type":"session","version":0,"id":"s","createdAt":0,"delegationDepth":0}` + "\n")
	b.WriteString(`{"type":"turn/start","seq":0,"time":0,"data":{"turn":1}}` + "\n")
	b.WriteString(`{"type":"step/start","seq":1,"time":0,"data":{"turn":1,"step":1}}` + "\n")
	const n = 1 << 11
	for i := 0; i < n; i++ {
		b.WriteString(`{"type":"assistant/chunk","seq":` + itoa(int64(i+2)) + `,"time":0,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"x"}}}` + "\n")
	}
	seq := int64(n + 2)
	for i := 0; i < 1000; i++ {
		b.WriteString(`{"type":"assistant/message","seq":` + itoa(seq) + `,"time":0,"data":{"turn":1,"step":1,"message":{"id":"a` + itoa(seq) + `","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}},"surfaceOp":"append","sourceEventSeqs":[[2,` + itoa(n+1) + `]]}` + "\n")
		seq++
	}
	b.WriteString(`{"type":"turn/end","seq":` + itoa(seq) + `,"time":0,"data":{"turn":1,"reason":{"kind":"completed"}}}` + "\n")
	_, err := ParseFile([]byte(b.String()), "session.jsonl")
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	require.ErrorContains(t, err, "expand past")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
