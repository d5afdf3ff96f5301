package session

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/internal/fixtures"
	"github.com/dshgo/dsh/messages"
)

// The load path's record decoder (DecodeRecord, and appendRecord under
// ParseFile) is held here to the reference decoder of
// reference_decode_test.go: for every line, the same events (every field,
// the typed payload included) or the same error (its text and its seq).

// decodeMismatch returns why DecodeRecord and the reference disagree on
// line, or "" when they agree.
func decodeMismatch(line []byte) string {
	got, gotErr := DecodeRecord(line)
	want, wantErr := referenceDecodeRecord(line)
	switch {
	case (gotErr == nil) != (wantErr == nil):
		return "one accepts, one refuses: got " + errText(gotErr) + ", reference " + errText(wantErr)
	case gotErr != nil:
		var g, w *DecodeError
		if !errors.As(gotErr, &g) || !errors.As(wantErr, &w) {
			return "an error is not a *DecodeError"
		}
		if g.Error() != w.Error() || g.Seq != w.Seq {
			return "errors differ: got " + g.Error() + ", reference " + w.Error()
		}
		return ""
	}
	if len(got) != len(want) {
		return "event counts differ"
	}
	for i := range want {
		// DeepEqual sees every field: the envelope, the data text byte for
		// byte, a nil against an empty sources slice, the payload.
		if !reflect.DeepEqual(asDecoded(got[i]), want[i]) {
			return "event " + string(AppendEvent(nil, got[i])) + " differs from the reference's " +
				string(AppendEvent(nil, want[i]))
		}
	}
	return ""
}

// asDecoded returns e as the reference decoder builds it: a member of a
// row that keeps only its text (compact.go) with its data in full and the
// typed view decodePayload gives that data (a *chunkStep of its turn and
// step); any other event as it is. Nothing is lost to the comparison: the
// data is compared byte for byte as Data writes it back, every other
// field as it is, and a member whose kept literals disagree with its
// integers is left compact, to differ.
func asDecoded(e Event) Event {
	if e.dataForm() != dataChunkText {
		return e
	}
	c := e.payload.(*chunkStep)
	if c.lits == nil || c.lits.turn != strconv.FormatInt(c.turn, 10) || c.lits.step != strconv.FormatInt(c.step, 10) ||
		c.lits.index != strconv.FormatInt(c.index, 10) {
		return e
	}
	x := e
	x.data = e.fullData()
	x.flags &^= flagChunkText
	x.payload = &chunkStep{turn: c.turn, step: c.step}
	return x
}

// allAsDecoded is asDecoded of each event (nil for nil).
func allAsDecoded(events []Event) []Event {
	if events == nil {
		return nil
	}
	out := make([]Event, len(events))
	for i, e := range events {
		out[i] = asDecoded(e)
	}
	return out
}

func errText(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// decodeEdgeLines are rows and events around the edges of the row schema
// and of the envelope: every way a row can fail, and shapes a writer other
// than ours may produce (key order, whitespace, number spellings).
var decodeEdgeLines = []string{
	// Range-encoded citations of a later format-0 writer, good and bad.
	`{"type":"assistant/message","seq":50,"time":0,"data":{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}},"surfaceOp":"append","sourceEventSeqs":[1,[3,5],7]}`,
	`{"type":"assistant/message","seq":50,"time":0,"data":{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}},"surfaceOp":"append","sourceEventSeqs":[[5,5]]}`,
	// Rows as we write them.
	`{"type":"text-chunks","seq0":0,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[-10,-3],"texts":["x","y","z"]}}`,
	`{"type":"reasoning-chunks","seq0":7,"time0":5,"data":{"turn":1,"step":2,"index":3,"dt":[0],"texts":["a\n\"b","\u00e9\ud83d\ude00"]}}`,
	`{"type":"tool-call-chunks","seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[-1,2],"id":"c","name":"n","args":["a","","\u00e9"]}}`,
	`{"type":"tool-call-chunks","seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[],"id":"c","args":["{"]}}`,
	// Other spellings of the same rows.
	` { "type" : "text-chunks" , "seq0":0,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[ 1 ],"texts":["x" ,"y"]} } `,
	`{"data":{"texts":["x","y"],"dt":[1],"index":0,"step":1,"turn":1},"time0":5,"seq0":0,"type":"text-chunks"}`,
	`{"type":"text-chunks","seq0":1e1,"time0":5.0,"data":{"turn":1.0,"step":10e-1,"index":0.0,"dt":[1e2],"texts":["x","y"]}}`,
	`{"type":"tool-call-chunks","seq0":3,"time0":10,"data":{"name":"n","id":"c","args":["a"],"dt":[],"index":0,"step":1,"turn":1}}`,
	`{"type":"text-chunks","seq0":0,"time0":0,"data":{"turn":-1,"step":-2,"index":0,"dt":[],"texts":[""]}}`,
	// Every refusal.
	`{"type":"text-chunks","seq0":0,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":[]}}`,
	`{"type":"text-chunks","seq0":0,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[1],"texts":["x"]}}`,
	`{"type":"text-chunks","seq0":0,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["x","y"]}}`,
	`{"type":"text-chunks","seq0":0,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":["1"],"texts":["x",2]}}`,
	`{"type":"text-chunks","seq0":0,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":["1"],"texts":["x","y"]}}`,
	`{"type":"text-chunks","seq0":0,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[1.5],"texts":["x","y"]}}`,
	`{"type":"text-chunks","seq0":0,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[1],"texts":[null,"y"]}}`,
	`{"type":"text-chunks","seq0":0,"time0":9007199254740990,"data":{"turn":1,"step":1,"index":0,"dt":[1,1],"texts":["x","y","z"]}}`,
	`{"type":"text-chunks","seq0":9007199254740991,"time0":0,"data":{"turn":1,"step":1,"index":0,"dt":[1],"texts":["x","y"]}}`,
	`{"type":"text-chunks","seq0":0,"time0":-9007199254740991,"data":{"turn":1,"step":1,"index":0,"dt":[-1],"texts":["x","y"]}}`,
	`{"type":"text-chunks","seq0":-1,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["x"]}}`,
	`{"type":"text-chunks","seq0":0,"time0":"5","data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["x"]}}`,
	`{"type":"text-chunks","seq0":0,"time0":5,"data":[]}`,
	`{"type":"text-chunks","seq0":0,"time0":5,"data":{},"extra":1}`,
	`{"type":"text-chunks","seq0":0,"time0":5}`,
	`{"type":"text-chunks","seq0":0,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["x"],"id":"c"}}`,
	`{"type":"text-chunks","seq0":0,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[]}}`,
	`{"type":"text-chunks","seq0":0,"time0":5,"data":{"turn":"1","step":1,"index":0,"dt":[],"texts":["x"]}}`,
	`{"type":"text-chunks","seq0":0,"time0":5,"data":{"turn":1,"step":1.5,"index":0,"dt":[],"texts":["x"]}}`,
	`{"type":"text-chunks","seq0":0,"time0":5,"data":{"turn":1,"step":1,"index":-1,"dt":[],"texts":["x"]}}`,
	`{"type":"text-chunks","seq0":0,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":{},"texts":["x"]}}`,
	`{"type":"text-chunks","seq0":0,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":"x"}}`,
	`{"type":"tool-call-chunks","seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[],"id":1,"args":["a"]}}`,
	`{"type":"tool-call-chunks","seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[],"id":"c","name":null,"args":["a"]}}`,
	`{"type":"tool-call-chunks","seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[],"args":["a"]}}`,
	`{"type":"tool-call-chunks","seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[],"id":"c","texts":["a"]}}`,
	`{"type":"reasoning-chunks","seq0":3,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"],"name":"n"}}`,
	`{"type":"text-chunks","seq0":0,"seq0":1,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["x"]}}`,
	`{"type":"text-chunks","seq0":0,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["\ud800"]}}`,
	`{"type":"text-chunks","seq0":-0,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["x"]}}`,
	`{"type":"text-chunks","seq0":0,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["x"]}`,
	// Events.
	`{"type":"assistant/chunk","seq":5,"time":1,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"hi"}}}`,
	`{"type":"assistant/chunk","seq":5,"time":1,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"hi"}},"surfaceOp":"append"}`,
	`{"type":"turn/start","seq":0,"time":0,"data":{"turn":1}}`,
	`{"type":"x/y","seq":1e2,"time":-3,"data":{"a":[1.5e300]},"ignorable":true}`,
	`{"type":"turn/start","seq":1,"time":0,"data":{"turn":1},"sourceEventSeqs":[]}`,
	`{"type":"text-chunks"}`,
	`[1]`,
	``,
}

// TestDecodeRecordMatchesReference: the corpus of the reference's logs, a
// log of ours, and the edge cases decode as the reference decoder decodes
// them.
func TestDecodeRecordMatchesReference(t *testing.T) {
	var lines [][]byte
	_, paths := fixtureFiles(t)
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		require.NoError(t, err)
		data := bytes.TrimSuffix(fixtures.Substitute(raw), []byte("\n"))
		lines = append(lines, bytes.Split(data, []byte("\n"))[1:]...)
	}
	rows := 0
	ours := AppendRecords(nil, fileEvents(t, fileSession()), PackChunks)
	lines = append(lines, bytes.Split(bytes.TrimSuffix(ours, []byte("\n")), []byte("\n"))...)
	for _, s := range decodeEdgeLines {
		lines = append(lines, []byte(s))
	}
	for _, ln := range lines {
		if bytes.Contains(ln, []byte(`-chunks"`)) {
			rows++
		}
		require.Empty(t, decodeMismatch(ln), "line %s", ln)
	}
	require.Greater(t, rows, 100, "the lines hold packed rows")
}

// TestRowMembersDecodeAsTheirData: the typed view decodeRow gives a row
// member without decoding it is the one decodePayload gives its data.
func TestRowMembersDecodeAsTheirData(t *testing.T) {
	for _, s := range decodeEdgeLines {
		evs, err := DecodeRecord([]byte(s))
		if err != nil || !strings.Contains(s, `-chunks"`) {
			continue
		}
		for _, e := range evs {
			require.Empty(t, rowMemberMismatch(e), s)
		}
	}
}

// rowMemberMismatch returns why e's payload and op are not what decoding
// its data gives, or "".
func rowMemberMismatch(e Event) string {
	e = asDecoded(e)
	p, err := decodePayload(e.Type(), e.data)
	if err != nil {
		return "the member's data does not decode: " + err.Error()
	}
	want := newEvent(e.Type(), e.seq, e.time, e.data)
	want.setPayload(p)
	if !reflect.DeepEqual(e, want) {
		return "the member differs from its decoded data"
	}
	return ""
}

// FuzzDecodeRecordMatchesReference is the differential test on arbitrary
// lines, seeded with the edge cases and a row of every kind.
func FuzzDecodeRecordMatchesReference(f *testing.F) {
	for _, s := range decodeEdgeLines {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if why := decodeMismatch(line); why != "" {
			t.Fatalf("%s\nline %q", why, line)
		}
		evs, err := DecodeRecord(line)
		if err != nil {
			return
		}
		j, _ := messages.ParseJSON(line)
		if typ, _ := j.Field("type"); strings.HasSuffix(typ.String(), `-chunks"`) {
			for _, e := range evs {
				if why := rowMemberMismatch(e); why != "" {
					t.Fatalf("%s\nline %q", why, line)
				}
			}
		}
	})
}

// parseMismatch returns why ParseFile and the reference scan disagree on
// a file, or "". When both read it, the logs they restore are compared
// too: File.Log (Restore, committing in place) against the reference
// file's events mirrored one by one into a fresh log (commit). A file
// the reference refuses to read whole (errReferenceTooBig) is not
// compared: only ParseFile reads it.
func parseMismatch(data []byte, name string) string {
	got, gotErr := ParseFile(data, name)
	want, wantErr := referenceParseFile(data, name)
	switch {
	case errors.Is(wantErr, errReferenceTooBig):
		return ""
	case (gotErr == nil) != (wantErr == nil):
		return "one reads, one refuses: got " + errText(gotErr) + ", reference " + errText(wantErr)
	case gotErr != nil:
		var g, w *CorruptError
		if errors.As(gotErr, &g) != errors.As(wantErr, &w) || !sameError(gotErr, wantErr) {
			return "errors differ: got " + gotErr.Error() + ", reference " + wantErr.Error()
		}
		if g != nil && (g.Path != w.Path || g.Offset != w.Offset || g.Line != w.Line || g.Seq != w.Seq) {
			return "corruption reports differ: got " + fmt.Sprintf("%+v", *g) + ", reference " + fmt.Sprintf("%+v", *w)
		}
		return ""
	}
	if got.Path != want.Path || got.Compressed != want.Compressed || !reflect.DeepEqual(got.Header, want.Header) {
		return "headers differ"
	}
	if !reflect.DeepEqual(allAsDecoded(got.Events), want.Events) {
		return fmt.Sprintf("events differ (%d events, reference %d)", len(got.Events), len(want.Events))
	}
	if (got.Torn == nil) != (want.Torn == nil) {
		return "one tail is torn, the other not"
	}
	if got.Torn != nil {
		g, w := *got.Torn, *want.Torn
		if g.Offset != w.Offset || g.Line != w.Line || g.NextSeq != w.NextSeq || !sameError(g.Err, w.Err) ||
			!reflect.DeepEqual(allAsDecoded(g.Recovered), w.Recovered) {
			return fmt.Sprintf("torn tails differ: got %+v, reference %+v", g, w)
		}
	}
	return logMismatch(got, want)
}

// sameError reports whether got and the reference's want say the same:
// the same text, or the same damaged zstd frame with only the
// compression library's account of the damage differing. The reader
// decodes a frame as a stream and the reference decodes it whole, and
// the library words one corruption differently in the two modes
// ("unexpected EOF" against "match offset (234) bigger than current
// history (103)"); where the damage is (the CorruptError's place, the
// torn tail's offset) is still compared exactly by the callers.
func sameError(got, want error) bool {
	g, w := got.Error(), want.Error()
	if g == w {
		return true
	}
	// The library's words follow the frame's name ("header zstd frame",
	// "zstd frame at offset N") and its colon.
	cut := func(s string) (string, bool) {
		i := strings.Index(s, "zstd frame")
		if i < 0 {
			return "", false
		}
		j := strings.Index(s[i:], ": ")
		return s[:i+j+2], j >= 0
	}
	gp, gok := cut(g)
	wp, wok := cut(w)
	return gok && wok && gp == wp
}

// logMismatch compares got.Log() with want's events committed one at a
// time.
func logMismatch(got, want *File) string {
	l, err := got.Log()
	ref, refErr := New(want.Header)
	if refErr == nil {
		for _, e := range want.Events {
			if refErr = ref.Mirror(e); refErr != nil {
				break
			}
		}
	}
	switch {
	case (err == nil) != (refErr == nil):
		return "one log restores, one refuses: got " + errText(err) + ", reference " + errText(refErr)
	case err != nil:
		if err.Error() != refErr.Error() {
			return "log errors differ: got " + err.Error() + ", reference " + refErr.Error()
		}
		return ""
	}
	gh, gok := l.RequestHeader()
	wh, wok := ref.RequestHeader()
	gc, gcok := l.RequestContext()
	wc, wcok := ref.RequestContext()
	gt, gs, gopen := l.OpenTurn()
	wt, ws, wopen := ref.OpenTurn()
	switch {
	case !reflect.DeepEqual(l.Events().Slice(), ref.Events().Slice()):
		return "log events differ"
	case !reflect.DeepEqual(l.SurfaceNodes(), ref.SurfaceNodes()):
		return "surfaces differ"
	case !reflect.DeepEqual(l.DeriveMessages().Slice(), ref.DeriveMessages().Slice()):
		return "derived messages differ"
	case gok != wok || !reflect.DeepEqual(gh, wh) || gcok != wcok || !reflect.DeepEqual(gc, wc):
		return "folded request header or context differ"
	case gt != wt || gs != ws || gopen != wopen || l.Turns() != ref.Turns():
		return "open turns differ"
	case l.FirstLiveSeq() != int64(len(got.Events)):
		return "the restored log's first live seq is not its length"
	}
	return ""
}

// diffFiles returns the corpus files and logs of ours in both framings:
// whole, and cut at a few points (torn tails, in either framing).
func diffFiles(t testing.TB) (files [][]byte, zstd []bool) {
	_, paths := fixtureFiles(t)
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		require.NoError(t, err)
		files, zstd = append(files, fixtures.Substitute(raw)), append(zstd, false)
	}
	// The older shapes and the later format-0 additions, whole and torn
	// (legacy_test.go, laterformat_test.go).
	lines := []string{lTurn1, lStep1, lUser, lAsst, lCall,
		`{"type":"tool/result","seq":5,"time":5,"data":{"turn":1,"step":1,"callId":"c1","content":[{"type":"text","text":"ok"}],"isError":false},"surfaceOp":"append","sourceEventSeqs":[4]}`,
		strings.Replace(lStepEnd, "%d", "6", 1),
		`{"type":"turn/end","seq":7,"time":1,"data":{"turn":1,"reason":{"kind":"disposed"}}}`}
	for _, text := range []string{legacyFile(lines...), legacyFile(lines[:6]...), laterLog} {
		files, zstd = append(files, []byte(text)), append(zstd, false)
	}
	events := fileEvents(t, fileSession())
	for _, opts := range []WriteOptions{{Pack: PackChunks}, {}, {Zstd: true, Pack: PackChunks, BatchSizes: []int{2, 7, 1}}, {Zstd: true}} {
		data, err := encodeFile(fileHeader, events, opts)
		require.NoError(t, err)
		for _, cut := range []int{len(data), len(data) - 1, len(data) - 9, len(data) * 2 / 3, len(data) / 3} {
			files, zstd = append(files, data[:cut]), append(zstd, opts.Zstd)
		}
	}
	return files, zstd
}

// TestParseFileMatchesReference: the corpus, and logs of ours whole and
// torn, read as the reference scan reads them and restore to the same log.
func TestParseFileMatchesReference(t *testing.T) {
	files, zstd := diffFiles(t)
	for i, data := range files {
		name := "s.jsonl"
		if zstd[i] {
			name += ".zstd"
		}
		require.Empty(t, parseMismatch(data, name), "file %d", i)
	}
	// Damage in the committed region, and a record that fails mid-row
	// with events of the row already decoded.
	lines := fileSession()
	body := strings.Join(lines, "\n") + "\n"
	for _, damaged := range []string{
		strings.Replace(body, `"seq":3,`, `"seq":4,`, 1),
		strings.Replace(body, `"seq":3,`, `"seq":"3",`, 1),
		strings.Replace(body, lines[len(lines)-1], `{"type":"text-chunks","seq0":`, 1),
	} {
		require.Empty(t, parseMismatch([]byte(fileHeaderLine()+"\n"+damaged), "s.jsonl"))
	}
	ours, err := encodeFile(fileHeader, fileEvents(t, lines), WriteOptions{Pack: PackChunks})
	require.NoError(t, err)
	row := regexp.MustCompile(`"texts":\["[^"]*","[^"]*"`)
	require.True(t, row.Match(ours))
	damagedRow := row.ReplaceAll(ours, []byte(`"texts":["x",7`))
	_, err = ParseFile(damagedRow, "s.jsonl")
	require.ErrorContains(t, err, "texts holds 7, not a string")
	require.Empty(t, parseMismatch(damagedRow, "s.jsonl"))
}

// FuzzParseFileMatchesReference is the file-level differential test on
// arbitrary bytes, in either framing. The seeds include the hostile files
// of scan_test.go; a file with a frame that decodes to more than
// refMaxContent is read by ParseFile alone (see parseMismatch), so that
// the reference, which holds a whole file's lines in memory, never takes
// more than a few MiB.
//
// Run it with -fuzzminimizetime=10x: by default the fuzzer minimises each
// new input for up to a minute, and the workers report 0 execs/s all that
// time (the target itself runs at thousands a second, bombs included).
func FuzzParseFileMatchesReference(f *testing.F) {
	files, zstd := diffFiles(f)
	for i, data := range files {
		if len(data) > 8<<10 {
			data = data[:4<<10]
		}
		f.Add(data, zstd[i])
	}
	for _, data := range bombSeeds() {
		f.Add(data, true)
	}
	f.Fuzz(func(t *testing.T, data []byte, zstdName bool) {
		name := "s.jsonl"
		if zstdName {
			name += ".zstd"
		}
		if why := parseMismatch(data, name); why != "" {
			t.Fatalf("%s\nfile %q", why, data)
		}
	})
}

// TestSameErrorIgnoresOnlyTheLibrarysWords: a damaged frame reported in
// the same place with the compression library's words differing (a stream
// decode against a whole decode, both found by the fuzz target) is the
// same report; anything else differing is not.
func TestSameErrorIgnoresOnlyTheLibrarysWords(t *testing.T) {
	e := func(s string) error { return errors.New(s) }
	require.True(t, sameError(
		e("session: s.jsonl: line 1: header zstd frame: unexpected EOF"),
		e("session: s.jsonl: line 1: header zstd frame: match offset (234) bigger than current history (103)")))
	require.True(t, sameError(
		e("session: s.jsonl.zstd: line 4: zstd frame at offset 190: match offset (3636963) bigger than current history (648)"),
		e("session: s.jsonl.zstd: line 4: zstd frame at offset 190: output bigger than max block size (1024)")))
	require.False(t, sameError(
		e("session: s.jsonl.zstd: line 4: zstd frame at offset 190: unexpected EOF"),
		e("session: s.jsonl.zstd: line 5: zstd frame at offset 290: unexpected EOF")))
	require.False(t, sameError(e("session: s.jsonl: line 2: seq 3, want 2"), e("session: s.jsonl: line 2: seq 4, want 2")))
}
