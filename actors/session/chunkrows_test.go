package session

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

// codecChunkLine returns an assistant/chunk event line holding chunk (JSON).
func codecChunkLine(seq, time int64, turn, step int, chunk string) string {
	return fmt.Sprintf(`{"type":"assistant/chunk","seq":%d,"time":%d,"data":{"turn":%d,"step":%d,"chunk":%s}}`,
		seq, time, turn, step, chunk)
}

func codecTextDelta(index int, text string) string {
	return fmt.Sprintf(`{"type":"text-delta","index":%d,"text":%s}`, index, messages.JSONString(text))
}

// codecDecodeRecords decodes every line of a storage buffer.
func codecDecodeRecords(t testing.TB, buf []byte) (events []Event, lines []string) {
	t.Helper()
	for _, ln := range bytes.SplitAfter(buf, []byte("\n")) {
		if len(ln) == 0 {
			continue
		}
		require.Equal(t, byte('\n'), ln[len(ln)-1])
		evs, err := DecodeRecord(ln[:len(ln)-1])
		require.NoError(t, err, string(ln))
		events = append(events, evs...)
		lines = append(lines, string(ln[:len(ln)-1]))
	}
	return events, lines
}

func codecRequireEvents(t testing.TB, want, got []Event) {
	t.Helper()
	require.Equal(t, len(want), len(got))
	for i := range want {
		require.True(t, want[i].Equal(got[i]), "event %d:\nwant %s\ngot  %s", i, AppendEvent(nil, want[i]), AppendEvent(nil, got[i]))
	}
}

// Scenario 36: runs shorter than three events stay verbatim.
func TestLeavesRunsShorterThanThreeEventsVerbatim(t *testing.T) {
	two := []Event{
		codecDecode(t, codecChunkLine(4, 100, 1, 1, codecTextDelta(0, "a"))),
		codecDecode(t, codecChunkLine(5, 101, 1, 1, codecTextDelta(0, "b"))),
		codecDecode(t, `{"type":"step/end","seq":6,"time":102,"data":{"turn":1,"step":1}}`),
		codecDecode(t, codecChunkLine(7, 103, 1, 1, codecTextDelta(0, "c"))),
	}
	buf := AppendRecords(nil, two, PackChunks)
	var want []byte
	for _, e := range two {
		want = append(AppendEvent(want, e), '\n')
	}
	require.Equal(t, string(want), string(buf))

	three := append(two[:2:2], codecDecode(t, codecChunkLine(6, 99, 1, 1, codecTextDelta(0, "c"))))
	buf = AppendRecords(nil, three, PackChunks)
	require.Equal(t, `{"type":"text-chunks","seq0":4,"time0":100,"data":{"turn":1,"step":1,"index":0,"dt":[1,-2],"texts":["a","b","c"]}}`+"\n", string(buf))
	got, _ := codecDecodeRecords(t, buf)
	codecRequireEvents(t, three, got)
}

// Scenario 36: member times are rebuilt through negative gaps.
func TestReconstructsTimestampsThroughNegativeDtGaps(t *testing.T) {
	times := []int64{1000, 400, 400, 1500, -20, 0}
	var events []Event
	for i, tm := range times {
		events = append(events, codecDecode(t, codecChunkLine(int64(10+i), tm, 2, 3,
			`{"type":"reasoning-delta","index":1,"text":"r`+strconv.Itoa(i)+`"}`)))
	}
	buf := AppendRecords(nil, events, PackChunks)
	require.Equal(t, `{"type":"reasoning-chunks","seq0":10,"time0":1000,"data":{"turn":2,"step":3,"index":1,"dt":[-600,0,1100,-1520,20],"texts":["r0","r1","r2","r3","r4","r5"]}}`+"\n", string(buf))
	got, _ := codecDecodeRecords(t, buf)
	codecRequireEvents(t, events, got)
	for i, e := range got {
		require.Equal(t, times[i], e.Time())
		require.EqualValues(t, 10+i, e.Seq())
		p, ok := e.Payload().(AssistantChunk)
		require.True(t, ok)
		require.Equal(t, messages.ChunkReasoningDelta, p.Chunk.Type())
		require.Equal(t, "r"+strconv.Itoa(i), p.Chunk.Text())
	}

	// A row read from another writer, with gaps reaching back before zero.
	evs, err := DecodeRecord([]byte(`{"type":"text-chunks","seq0":0,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[-10,-3],"texts":["x","y","z"]}}`))
	require.NoError(t, err)
	require.Equal(t, []int64{5, -5, -8}, []int64{evs[0].Time(), evs[1].Time(), evs[2].Time()})
}

func TestChunkRowsPackToolCallRuns(t *testing.T) {
	named := func(seq int64, id, args string) Event {
		return codecDecode(t, codecChunkLine(seq, seq*10, 1, 2, fmt.Sprintf(
			`{"type":"tool-call-delta","index":1,"id":%q,"name":"bash","argumentsDelta":%s}`, id, messages.JSONString(args))))
	}
	bare := func(seq int64, id, args string) Event {
		return codecDecode(t, codecChunkLine(seq, seq*10, 1, 2, fmt.Sprintf(
			`{"argumentsDelta":%s,"id":%q,"index":1,"type":"tool-call-delta"}`, messages.JSONString(args), id)))
	}
	events := []Event{
		named(0, "c1", ""), named(1, "c1", "{"), named(2, "c1", `"a"`),
		bare(3, "c1", ":"), bare(4, "c1", "1"), bare(5, "c1", "}"),
		bare(6, "c2", "x"), bare(7, "c2", "y"),
	}
	buf := AppendRecords(nil, events, PackChunks)
	require.Equal(t, ``+
		`{"type":"tool-call-chunks","seq0":0,"time0":0,"data":{"turn":1,"step":2,"index":1,"dt":[10,10],"id":"c1","name":"bash","args":["","{","\"a\""]}}`+"\n"+
		`{"type":"tool-call-chunks","seq0":3,"time0":30,"data":{"turn":1,"step":2,"index":1,"dt":[10,10],"id":"c1","args":[":","1","}"]}}`+"\n"+
		string(AppendEvent(nil, events[6]))+"\n"+
		string(AppendEvent(nil, events[7]))+"\n", string(buf))
	got, _ := codecDecodeRecords(t, buf)
	codecRequireEvents(t, events, got)
	// Unpacked members come back in the canonical key order.
	require.Equal(t, `{"turn":1,"step":2,"chunk":{"type":"tool-call-delta","index":1,"id":"c1","argumentsDelta":":"}}`, got[3].Data().String())
}

// TestChunkRowsWhitelist checks that everything off the whitelist breaks a
// run and is written verbatim.
func TestChunkRowsWhitelist(t *testing.T) {
	ok := func(seq int64) string { return codecChunkLine(seq, 0, 1, 1, codecTextDelta(0, "t")) }
	cases := map[string]string{
		"surfaceOp":        `{"type":"assistant/chunk","seq":1,"time":0,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"t"}},"surfaceOp":"append"}`,
		"sourceEventSeqs":  `{"type":"assistant/chunk","seq":1,"time":0,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"t"}},"sourceEventSeqs":[]}`,
		"ignorable":        `{"type":"assistant/chunk","seq":1,"time":0,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"t"}},"ignorable":true}`,
		"extra data key":   `{"type":"assistant/chunk","seq":1,"time":0,"data":{"turn":1,"step":1,"attempt":1,"chunk":{"type":"text-delta","index":0,"text":"t"}}}`,
		"extra chunk key":  codecChunkLine(1, 0, 1, 1, `{"type":"text-delta","index":0,"text":"t","id":"x"}`),
		"other index":      codecChunkLine(1, 0, 1, 1, codecTextDelta(1, "t")),
		"other step":       codecChunkLine(1, 0, 1, 2, codecTextDelta(0, "t")),
		"other turn":       codecChunkLine(1, 0, 2, 1, codecTextDelta(0, "t")),
		"other kind":       codecChunkLine(1, 0, 1, 1, `{"type":"reasoning-delta","index":0,"text":"t"}`),
		"seq gap":          ok(2),
		"block-start":      codecChunkLine(1, 0, 1, 1, `{"type":"block-start","index":0,"blockType":"text"}`),
		"turn spelled 1.0": `{"type":"assistant/chunk","seq":1,"time":0,"data":{"turn":1.0,"step":1,"chunk":{"type":"text-delta","index":0,"text":"t"}}}`,
		"other event type": `{"type":"x/chunk","seq":1,"time":0,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"t"}}}`,
		"tool extra key":   codecChunkLine(1, 0, 1, 1, `{"type":"tool-call-delta","index":0,"id":"c","argumentsDelta":"","x":1}`),
	}
	// Every gap here is 2^54-2 ms: not a safe integer.
	var unsafeGaps []string
	for i := range int64(4) {
		unsafeGaps = append(unsafeGaps, codecChunkLine(i, (2*(i%2)-1)*maxSafe, 1, 1, codecTextDelta(0, "t")))
	}
	t.Run("unsafe time gap", func(t *testing.T) {
		var events []Event
		for _, ln := range unsafeGaps {
			events = append(events, codecDecode(t, ln))
		}
		buf := AppendRecords(nil, events, PackChunks)
		require.NotContains(t, string(buf), "-chunks")
		got, _ := codecDecodeRecords(t, buf)
		codecRequireEvents(t, events, got)
	})
	for name, middle := range cases {
		t.Run(name, func(t *testing.T) {
			events := []Event{codecDecode(t, ok(0)), codecDecode(t, middle), codecDecode(t, ok(2)), codecDecode(t, ok(3))}
			if name == "seq gap" {
				events[1] = codecDecode(t, ok(1))
				events[2] = codecDecode(t, ok(3))
				events[3] = codecDecode(t, ok(4))
			}
			buf := AppendRecords(nil, events, PackChunks)
			require.NotContains(t, string(buf), "-chunks", "nothing may pack")
			got, _ := codecDecodeRecords(t, buf)
			codecRequireEvents(t, events, got)
		})
	}
}

func TestDecodeRecordRejectsMalformedRows(t *testing.T) {
	const good = `{"type":"text-chunks","seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[1,2],"texts":["a","b","c"]}}`
	evs, err := DecodeRecord([]byte(good))
	require.NoError(t, err)
	require.Len(t, evs, 3)
	cases := map[string]string{
		"envelope key":      `{"type":"text-chunks","seq":3,"seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"]}}`,
		"missing time0":     `{"type":"text-chunks","seq0":3,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"]}}`,
		"negative seq0":     `{"type":"text-chunks","seq0":-1,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"]}}`,
		"extra data key":    `{"type":"text-chunks","seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"],"id":"x"}}`,
		"args in text row":  `{"type":"text-chunks","seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[],"args":["a"]}}`,
		"missing turn":      `{"type":"reasoning-chunks","seq0":3,"time0":10,"data":{"step":1,"index":0,"dt":[],"texts":["a"]}}`,
		"string turn":       `{"type":"text-chunks","seq0":3,"time0":10,"data":{"turn":"1","step":1,"index":0,"dt":[],"texts":["a"]}}`,
		"negative index":    `{"type":"text-chunks","seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":-1,"dt":[],"texts":["a"]}}`,
		"short dt":          `{"type":"text-chunks","seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[1],"texts":["a","b","c"]}}`,
		"long dt":           `{"type":"text-chunks","seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[1,2],"texts":["a","b"]}}`,
		"fractional dt":     `{"type":"text-chunks","seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[0.5],"texts":["a","b"]}}`,
		"empty texts":       `{"type":"text-chunks","seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":[]}}`,
		"number text":       `{"type":"text-chunks","seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":[1]}}`,
		"time overflow":     `{"type":"text-chunks","seq0":3,"time0":9007199254740991,"data":{"turn":1,"step":1,"index":0,"dt":[1],"texts":["a","b"]}}`,
		"tool without id":   `{"type":"tool-call-chunks","seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[],"args":["a"]}}`,
		"tool numeric name": `{"type":"tool-call-chunks","seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[],"id":"c","name":1,"args":["a"]}}`,
		"tool with texts":   `{"type":"tool-call-chunks","seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[],"id":"c","texts":["a"]}}`,
		"data not object":   `{"type":"tool-call-chunks","seq0":3,"time0":10,"data":[]}`,
	}
	for name, line := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeRecord([]byte(line))
			require.Error(t, err)
			require.Contains(t, err.Error(), "malformed")
			var de *DecodeError
			require.True(t, errors.As(err, &de))
		})
	}
}

// codecGenEvents returns a random batch mixing every chunk kind, turns, steps,
// indexes, call ids and names, times with negative and unsafe gaps, and
// events that break runs. Seqs are contiguous from a random start.
func codecGenEvents(r *rand.Rand) []Event {
	texts := []string{"", "a", " the", "\"quoted\"", "line\nbreak", "tab\t", "é", "日本", "\u2028", "\\", "\x01", "🙂"}
	ids := []string{"call_1", "call_2", ""}
	n := r.IntN(40)
	seq := r.Int64N(1000)
	tm := r.Int64N(2_000_000_000_000) - 1_000_000_000_000
	var out []Event
	for range n {
		switch x := r.IntN(20); {
		case x < 1:
			tm = int64(maxSafe) * int64(1-2*r.IntN(2)) // a gap that cannot be packed
		case x < 3:
			tm -= r.Int64N(1000)
		default:
			tm += r.Int64N(30)
		}
		tm = min(max(tm, -maxSafe), maxSafe)
		turn, step, index := 1+r.IntN(2), 1+r.IntN(2), r.IntN(2)
		if p, ok := lastChunk(out); ok && r.IntN(4) > 0 { // mostly keep going in the same place
			turn, step, index = int(p.Turn), int(p.Step), p.Chunk.Index()
		}
		text := messages.JSONString(texts[r.IntN(len(texts))]).String()
		var line string
		switch k := r.IntN(16); {
		case k < 5:
			line = codecChunkLine(seq, tm, turn, step, fmt.Sprintf(`{"type":"text-delta","index":%d,"text":%s}`, index, text))
		case k < 8:
			line = codecChunkLine(seq, tm, turn, step, fmt.Sprintf(`{"text":%s,"index":%d,"type":"reasoning-delta"}`, text, index))
		case k < 11:
			id := messages.JSONString(ids[r.IntN(len(ids))]).String()
			name := ""
			if r.IntN(2) == 0 {
				name = `"name":"` + []string{"bash", "read"}[r.IntN(2)] + `",`
			}
			if p, ok := lastChunk(out); ok && p.Chunk.Type() == messages.ChunkToolCallDelta && r.IntN(4) > 0 {
				id, name = messages.JSONString(p.Chunk.CallID()).String(), ""
				if n, has := p.Chunk.Name(); has {
					name = `"name":` + messages.JSONString(n).String() + `,`
				}
			}
			line = codecChunkLine(seq, tm, turn, step, fmt.Sprintf(`{"type":"tool-call-delta","index":%d,"id":%s,%s"argumentsDelta":%s}`, index, id, name, text))
		case k < 12:
			line = codecChunkLine(seq, tm, turn, step, fmt.Sprintf(`{"type":"block-start","index":%d,"blockType":"text"}`, index))
		case k < 13:
			line = fmt.Sprintf(`{"type":"assistant/chunk","seq":%d,"time":%d,"data":{"step":%d,"turn":%d,"chunk":{"type":"text-delta","index":%d,"text":%s}},"ignorable":true}`,
				seq, tm, step, turn, index, text)
		case k < 14:
			line = fmt.Sprintf(`{"type":"assistant/chunk","seq":%d,"time":%d,"data":{"turn":%d,"step":%d,"chunk":{"type":"text-delta","index":%d,"text":%s},"x":1}}`,
				seq, tm, turn, step, index, text)
		case k < 15:
			line = fmt.Sprintf(`{"type":"step/start","seq":%d,"time":%d,"data":{"turn":%d,"step":%d}}`, seq, tm, turn, step)
		default:
			line = fmt.Sprintf(`{"type":"session/title","seq":%d,"time":%d,"data":{"title":%s}}`, seq, tm, text)
		}
		e, err := DecodeEvent([]byte(line))
		if err != nil {
			panic(fmt.Sprintf("generator wrote a bad line %s: %v", line, err))
		}
		out = append(out, e)
		if r.IntN(30) == 0 {
			seq += 2 // a gap breaks a run; a batch need not be contiguous for the codec
		} else {
			seq++
		}
	}
	return out
}

func lastChunk(events []Event) (AssistantChunk, bool) {
	if len(events) == 0 {
		return AssistantChunk{}, false
	}
	p, ok := events[len(events)-1].Payload().(AssistantChunk)
	return p, ok
}

// TestChunkRowsRoundTripProperty: over random batches, decoding the packed
// encoding gives back the events, and the unpacked encoding is exactly one
// AppendEvent line per event.
func TestChunkRowsRoundTripProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(36, 2026))
	rows := map[string]int{}
	for i := range 1500 {
		events := codecGenEvents(r)

		packed := AppendRecords(nil, events, PackChunks)
		got, lines := codecDecodeRecords(t, packed)
		codecRequireEvents(t, events, got)
		for _, ln := range lines {
			for _, tag := range []string{rowText, rowReasoning, rowToolCall} {
				if strings.HasPrefix(ln, `{"type":"`+tag+`"`) {
					rows[tag]++
				}
			}
		}

		plain := AppendRecords(nil, events, Verbatim)
		var want []byte
		for _, e := range events {
			want = append(AppendEvent(want, e), '\n')
		}
		require.Equal(t, string(want), string(plain), "iteration %d", i)
		got, _ = codecDecodeRecords(t, plain)
		codecRequireEvents(t, events, got)

		// Packing is idempotent over a decode: the same rows come out.
		require.Equal(t, string(packed), string(AppendRecords(nil, got, PackChunks)))
	}
	for _, tag := range []string{rowText, rowReasoning, rowToolCall} {
		require.Greater(t, rows[tag], 25, "the generator must exercise %s rows", tag)
	}
}

// TestChunkRowsAreBoundedInSize: a model stream of more than 20 MiB in one
// batch is one run; it packs into consecutive rows each at most
// maxRowBytes (well under the reader's DefaultMaxRecordBytes), which
// decode back to the same events, and packing them again gives the same
// rows. Members so large that a row holds fewer than three are written
// verbatim, also under the limit.
func TestChunkRowsAreBoundedInSize(t *testing.T) {
	for _, piece := range []int{64 << 10, 600 << 10, maxRowBytes + 10} {
		t.Run(strconv.Itoa(piece), func(t *testing.T) {
			text := strings.Repeat("x", piece-1) + "\n" // one escaped byte
			var events []Event
			total := 0
			for seq := int64(0); total <= 20<<20; seq++ {
				events = append(events, codecDecode(t, codecChunkLine(seq, 1000+seq, 1, 1, codecTextDelta(0, text))))
				total += len(text)
			}
			packed := AppendRecords(nil, events, PackChunks)
			got, lines := codecDecodeRecords(t, packed)
			codecRequireEvents(t, events, got)
			rows := 0
			for _, ln := range lines {
				if strings.HasPrefix(ln, `{"type":"`+rowText+`"`) {
					rows++
					require.LessOrEqual(t, len(ln), maxRowBytes)
				}
				require.LessOrEqual(t, len(ln), DefaultMaxRecordBytes)
			}
			if piece < maxRowBytes/3 {
				require.Greater(t, rows, 20, "the run must be cut into many rows")
			}
			require.Equal(t, string(packed), string(AppendRecords(nil, got, PackChunks)))
		})
	}
}

// TestPackedDataIsTheRowData: the exported packed-run writer is what a
// JSONL row holds as its data (so the SQLite store, which writes a packed
// row's data column with it, writes the same object), and PackedDataLen
// is its exact length for every prefix of every run, over random batches
// with every kind, negative gaps and named and unnamed tool runs.
func TestPackedDataIsTheRowData(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 2026))
	rows := 0
	for range 500 {
		events := codecGenEvents(r)
		for i := 0; i < len(events); {
			m, ok := Packable(events[i])
			if !ok {
				i++
				continue
			}
			run := []PackMember{m}
			for i++; i < len(events); i++ {
				n, ok := Packable(events[i])
				if !ok || !run[len(run)-1].Continues(n) {
					break
				}
				run = append(run, n)
			}
			for k := 1; k <= len(run); k++ {
				data := AppendPackedData(nil, run[:k])
				require.Equal(t, len(data), PackedDataLen(run[:k]), "%s", data)
				require.Equal(t, string(data), messages.MustParseJSON(string(data)).String())
			}
		}
		_, lines := codecDecodeRecords(t, AppendRecords(nil, events, PackChunks))
		for _, ln := range lines {
			row := messages.MustParseJSON(ln)
			typ, _ := row.Field("type")
			if !slices.Contains([]string{`"` + rowText + `"`, `"` + rowReasoning + `"`, `"` + rowToolCall + `"`}, typ.String()) {
				continue
			}
			members, err := DecodeRecord([]byte(ln))
			require.NoError(t, err)
			run := make([]PackMember, len(members))
			for k, e := range members {
				run[k], _ = Packable(e)
			}
			data, _ := row.Field("data")
			require.Equal(t, data.String(), string(AppendPackedData(nil, run)))
			require.Equal(t, `"`+run[0].Tag()+`"`, typ.String())
			rows++
		}
	}
	require.Greater(t, rows, 100)
}
