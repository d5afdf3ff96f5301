package replay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// recordedGroups is the test's own, naive grouping of a log's chunk events:
// consecutive chunks of one (turn, step), split after a finish. Every
// corpus log writes a stream's chunks contiguously, so this must agree with
// Script's keyed grouping there.
func recordedGroups(events []session.Event) [][]string {
	var groups [][]string
	var turn, step int64
	open := false
	for _, ev := range events {
		if ev.Type() != session.TypeAssistantChunk {
			continue
		}
		tn, st, _ := ev.TurnStep()
		c, _ := ev.Data().Field("chunk")
		if !open || tn != turn || st != step {
			groups = append(groups, nil)
			turn, step, open = tn, st, true
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], c.String())
		if strings.HasPrefix(c.String(), `{"type":"finish"`) {
			open = false
		}
	}
	return groups
}

// TestCorpusServesRecordedGroups loads every log of the corpus and checks
// that the provider serves each recorded chunk group back, in order, as the
// same chunk JSON, and fails the call after the last.
func TestCorpusServesRecordedGroups(t *testing.T) {
	files := corpus(t)
	acp := 0
	for _, cf := range files {
		if strings.HasPrefix(cf.name, "acp/") {
			acp++
		}
		t.Run(cf.name, func(t *testing.T) {
			events := cf.events(t)
			p, err := FromEvents(events)
			require.NoError(t, err)
			groups := recordedGroups(events)
			k := 0
			for i, e := range p.Entries() {
				o, recorded := e.Origin()
				require.True(t, recorded)
				if o.Compaction {
					require.NoError(t, serve(t, p, -1).err) // checked in TestCompactionSummaryStream
					continue
				}
				require.Less(t, k, len(groups))
				want := groups[k]
				k++
				require.Equal(t, KindChunks, e.Kind())
				cancelAfter := -1
				if e.Open() {
					cancelAfter = len(want)
				}
				require.Equal(t, i, p.NextCall())
				got := serve(t, p, cancelAfter)
				require.Equal(t, want, got.chunks, "call %d (turn %d step %d attempt %d)", i, o.Turn, o.Step, o.Attempt)
				if e.Open() {
					require.Equal(t, llm.CodeAborted, failureOf(t, got.err).Code, "an open group hangs until cancelled")
				} else {
					require.NoError(t, got.err)
				}
			}
			require.Equal(t, len(groups), k, "every group is served")
			extra := serve(t, p, -1)
			require.Empty(t, extra.chunks)
			f := failureOf(t, extra.err)
			require.Equal(t, llm.CodeUnknown, f.Code)
			require.Equal(t, fmt.Sprintf("replay: no recorded stream for call %d", p.Len()), f.Message)
		})
	}
	require.Equal(t, 56, acp, "the acp scenarios")
}

// TestCorpusFromFile loads every acp scenario through FromFile, with its
// override when it has one.
func TestCorpusFromFile(t *testing.T) {
	overrides := 0
	for _, cf := range corpus(t) {
		if !strings.HasPrefix(cf.name, "acp/") {
			continue
		}
		t.Run(cf.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "session.jsonl")
			require.NoError(t, os.WriteFile(path, cf.data, 0o600))
			script, err := Script(cf.events(t))
			require.NoError(t, err)
			want := script
			ovPath := filepath.Join(filepath.Dir(cf.path), OverrideFileName)
			if data, err := os.ReadFile(ovPath); err == nil {
				overrides++
				require.NoError(t, os.WriteFile(filepath.Join(dir, OverrideFileName), data, 0o600))
				o, err := ParseOverride(data)
				require.NoError(t, err)
				require.False(t, o.IsZero())
				want, err = o.Apply(script)
				require.NoError(t, err)
				require.NotEmpty(t, want)
			}
			p, err := FromFile(path, Options{ReadyDir: dir})
			require.NoError(t, err)
			require.Equal(t, len(want), p.Len())
			for i, e := range p.Entries() {
				require.Equal(t, entryText(want[i]), entryText(e), "entry %d", i)
			}
			plain, err := FromFile(path, Options{NoOverride: true})
			require.NoError(t, err)
			require.Equal(t, len(script), plain.Len(), "NoOverride serves the recording")
		})
	}
	require.Equal(t, 7, overrides)
}

// entryText renders an entry for comparison.
func entryText(e Entry) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s open=%v ready=%q failure=%v\n", e.Kind(), e.Open(), e.ReadyFile(), e.Failure())
	for _, c := range e.Chunks() {
		b.WriteString(c.JSON().String())
		b.WriteByte('\n')
	}
	return b.String()
}

func TestScenarioOverrides(t *testing.T) {
	load := func(t *testing.T, scenario string) (*Provider, string) {
		for _, cf := range corpus(t) {
			if cf.name == "acp/"+scenario+"/session.jsonl" {
				dir := t.TempDir()
				path := filepath.Join(dir, "session.jsonl")
				require.NoError(t, os.WriteFile(path, cf.data, 0o600))
				p, err := FromFile(path, Options{ReadyDir: dir,
					OverridePath: filepath.Join(filepath.Dir(cf.path), OverrideFileName)})
				require.NoError(t, err)
				return p, dir
			}
		}
		t.Fatalf("no scenario %s", scenario)
		return nil, ""
	}

	t.Run("cancel", func(t *testing.T) {
		p, dir := load(t, "cancel")
		require.Equal(t, 1, p.Len())
		require.Equal(t, KindHang, p.Entry(0).Kind())
		ready := filepath.Join(dir, ".dsh-snapshot-stream-ready")
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			var got served
			done := make(chan struct{})
			go func() {
				defer close(done)
				for _, err := range p.Stream(ctx, anyRequest) {
					got.err = err
				}
			}()
			synctest.Wait() // the stream is blocked in its hang
			require.FileExists(t, ready)
			select {
			case <-done:
				t.Fatal("a hang returned before the cancel")
			default:
			}
			cancel(errors.New("user cancel"))
			<-done
			f := failureOf(t, got.err)
			require.Equal(t, llm.CodeAborted, f.Code)
			require.Contains(t, f.Message, "user cancel")
		})
	})

	t.Run("error-finish", func(t *testing.T) {
		p, _ := load(t, "error-finish")
		require.Equal(t, 1, p.Len())
		got := serve(t, p, -1)
		require.Empty(t, got.chunks)
		require.Equal(t, messages.LlmFailure{Message: "simulated provider error (HTTP 401)", Code: "AUTH"}, failureOf(t, got.err))
	})

	t.Run("session-title-after-turn", func(t *testing.T) {
		p, _ := load(t, "session-title-after-turn")
		require.Equal(t, 1, p.Len())
		got := serve(t, p, -1)
		require.NoError(t, got.err)
		require.Len(t, got.chunks, 8)
		require.Equal(t, `{"type":"text-delta","index":0,"text":" durable"}`, got.chunks[2], "override chunks keep their JSON, compacted")
	})
}

func TestThrowServesChunksThenFails(t *testing.T) {
	chunks := []messages.StreamChunk{
		messages.BlockStartChunk(0, messages.BlockText),
		messages.TextDeltaChunk(0, "par"),
	}
	f := messages.LlmFailure{Message: "overloaded", Code: llm.CodeServer}
	p := New([]Entry{ThrowEntry(chunks, f)}, Options{})
	got := serve(t, p, -1)
	require.Equal(t, []string{chunks[0].JSON().String(), chunks[1].JSON().String()}, got.chunks)
	require.Equal(t, f, failureOf(t, got.err))

	// Cancelled before its failure: aborted instead.
	p = New([]Entry{ThrowEntry(chunks, f)}, Options{})
	got = serve(t, p, 2)
	require.Len(t, got.chunks, 2)
	require.Equal(t, llm.CodeAborted, failureOf(t, got.err).Code)
}

func TestHangWithoutReadyFileAndCancelBeforeStart(t *testing.T) {
	p := New([]Entry{HangEntry(""), ChunksEntry([]messages.StreamChunk{messages.BlockStartChunk(0, messages.BlockText)})}, Options{})
	got := serve(t, p, 0) // cancelled before it starts
	require.Equal(t, llm.CodeAborted, failureOf(t, got.err).Code)
	got = serve(t, p, 0)
	require.Empty(t, got.chunks, "a cancelled call serves nothing")
	require.Equal(t, llm.CodeAborted, failureOf(t, got.err).Code)
}

func TestHangReadyFileError(t *testing.T) {
	p := New([]Entry{HangEntry("missing-dir/ready")}, Options{ReadyDir: t.TempDir()})
	got := serve(t, p, -1)
	f := failureOf(t, got.err)
	require.Equal(t, llm.CodeUnknown, f.Code)
	require.Contains(t, f.Message, "ready file")
}

func TestConsumerStops(t *testing.T) {
	cs := []messages.StreamChunk{messages.BlockStartChunk(0, messages.BlockText), messages.TextDeltaChunk(0, "a"), messages.TextDeltaChunk(0, "b")}
	p := New([]Entry{ChunksEntry(cs)}, Options{Name: "deepseek-official"})
	require.Equal(t, "deepseek-official", p.Name())
	n := 0
	for range p.Stream(context.Background(), anyRequest) {
		n++
		if n == 1 {
			break
		}
	}
	require.Equal(t, 1, n)
	require.Equal(t, DefaultName, New(nil, Options{}).Name())
}

func TestCallOrder(t *testing.T) {
	var entries []Entry
	for i := range 50 {
		entries = append(entries, ChunksEntry([]messages.StreamChunk{messages.TextDeltaChunk(i, "x")}))
	}
	p := New(entries, Options{})

	// The call number is taken when Stream is called, not when it is
	// iterated.
	first := p.Stream(context.Background(), anyRequest)
	second := p.Stream(context.Background(), anyRequest)
	require.Equal(t, 2, p.NextCall())
	for c := range second {
		require.Equal(t, 1, c.Index())
	}
	for c := range first {
		require.Equal(t, 0, c.Index())
	}

	// Concurrent calls get every remaining entry exactly once.
	seen := make([]int, len(entries))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range len(entries) - 2 {
		wg.Go(func() {
			for c, err := range p.Stream(context.Background(), anyRequest) {
				if err == nil {
					mu.Lock()
					seen[c.Index()]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, len(entries), p.NextCall())
	for i := 2; i < len(entries); i++ {
		require.Equal(t, 1, seen[i], "entry %d", i)
	}
}

func TestScriptGrouping(t *testing.T) {
	t.Run("retry attempts", func(t *testing.T) {
		events := parseEvents(t, jsonl(
			turnStart(1), stepStart(1, 1),
			chunk(1, 1, cErrFinish),
			`{"type":"llm/retry","data":{"turn":1,"step":1}}`,
			chunk(1, 1, cStart), chunk(1, 1, cDelta), chunk(1, 1, cEnd), chunk(1, 1, cStop),
			stepEnd(1, 1), turnEnd(1, completed),
		))
		script, err := Script(events)
		require.NoError(t, err)
		require.Len(t, script, 2)
		o0, _ := script[0].Origin()
		o1, _ := script[1].Origin()
		require.Equal(t, Origin{Turn: 1, Step: 1, Attempt: 1, FirstSeq: 2, LastSeq: 2}, o0)
		require.Equal(t, Origin{Turn: 1, Step: 1, Attempt: 2, FirstSeq: 4, LastSeq: 7}, o1)
		require.Equal(t, 1, script[0].NumChunks())
		require.Equal(t, messages.FinishError, script[0].Chunk(0).Reason().Kind)
	})

	t.Run("interleaved foreign events", func(t *testing.T) {
		events := parseEvents(t, jsonl(
			turnStart(1), stepStart(1, 1),
			chunk(1, 1, cStart),
			`{"type":"hook/invoked","data":{"x":1}}`,
			chunk(1, 1, cDelta), chunk(1, 1, cEnd), chunk(1, 1, cStop),
			stepEnd(1, 1), turnEnd(1, completed),
		))
		script, err := Script(events)
		require.NoError(t, err)
		require.Len(t, script, 1)
		require.Equal(t, 4, script[0].NumChunks())
	})

	t.Run("unfinished group in a completed turn", func(t *testing.T) {
		events := parseEvents(t, jsonl(
			turnStart(1), stepStart(1, 1),
			chunk(1, 1, cStart), chunk(1, 1, cDelta),
			stepEnd(1, 1), turnEnd(1, completed),
			turnStart(2), stepStart(2, 1),
			chunk(2, 1, cStart), chunk(2, 1, cStop),
			stepEnd(2, 1), turnEnd(2, completed),
		))
		_, err := Script(events)
		require.ErrorContains(t, err, "turn 1 step 1 (attempt 1, seqs 2..3) does not end in a finish chunk")
		_, err = FromEvents(events)
		require.Error(t, err)
	})

	t.Run("cancelled turn, then another turn", func(t *testing.T) {
		events := parseEvents(t, jsonl(
			turnStart(1), stepStart(1, 1),
			chunk(1, 1, cStart), chunk(1, 1, cDelta),
			stepEnd(1, 1), turnEnd(1, abortUser),
			turnStart(2), stepStart(2, 1),
			chunk(2, 1, cStart), chunk(2, 1, cDelta), chunk(2, 1, cEnd), chunk(2, 1, cStop),
			stepEnd(2, 1), turnEnd(2, completed),
		))
		p, err := FromEvents(events)
		require.NoError(t, err)
		require.Equal(t, 2, p.Len())
		require.True(t, p.Entry(0).Open())
		require.False(t, p.Entry(1).Open())
		got := serve(t, p, 2)
		require.Len(t, got.chunks, 2)
		require.Equal(t, llm.CodeAborted, failureOf(t, got.err).Code)
		got = serve(t, p, -1)
		require.NoError(t, got.err)
		require.Len(t, got.chunks, 4)
	})

	t.Run("turn numbers reused after a closed open group", func(t *testing.T) {
		events := parseEvents(t, jsonl(
			turnStart(1), stepStart(1, 1),
			chunk(1, 1, cStart),
			turnEnd(1, `{"kind":"interrupted"}`),
			turnStart(1), stepStart(1, 1),
			chunk(1, 1, cStart), chunk(1, 1, cStop),
			stepEnd(1, 1), turnEnd(1, completed),
		))
		script, err := Script(events)
		require.NoError(t, err)
		require.Len(t, script, 2, "the turn/end closed the first group")
		o, _ := script[1].Origin()
		require.Equal(t, 2, o.Attempt)
	})

	t.Run("crash-cut last group", func(t *testing.T) {
		events := parseEvents(t, jsonl(
			turnStart(1), stepStart(1, 1),
			chunk(1, 1, cStart), chunk(1, 1, cStop),
			stepEnd(1, 1), stepStart(1, 2),
			chunk(1, 2, cStart), chunk(1, 2, cDelta),
		))
		script, err := Script(events)
		require.NoError(t, err)
		require.Len(t, script, 2)
		require.True(t, script[1].Open())
	})

	t.Run("no chunks", func(t *testing.T) {
		script, err := Script(parseEvents(t, jsonl(turnStart(1), turnEnd(1, completed))))
		require.NoError(t, err)
		require.Empty(t, script)
	})
}

func TestCompactionSummaryStream(t *testing.T) {
	var cf *corpusFile
	for _, c := range corpus(t) {
		if c.name == "headless/snapshots_compaction-recovery/session.jsonl" {
			cf = &c
		}
	}
	require.NotNil(t, cf)
	script, err := Script(cf.events(t))
	require.NoError(t, err)
	require.Len(t, script, 4)
	var origins []Origin
	for _, e := range script {
		o, _ := e.Origin()
		origins = append(origins, o)
	}
	require.Equal(t, []Origin{
		{Turn: 1, Step: 1, Attempt: 1, FirstSeq: 8, LastSeq: 12},
		{Turn: 1, Step: 2, Attempt: 1, FirstSeq: 18, LastSeq: 18},
		{Turn: 1, Step: 2, Attempt: 1, FirstSeq: 20, LastSeq: 20, Compaction: true},
		{Turn: 1, Step: 2, Attempt: 2, FirstSeq: 23, LastSeq: 27},
	}, origins)
	p := New(script, Options{})
	serve(t, p, -1)
	serve(t, p, -1)
	got := serve(t, p, -1)
	require.NoError(t, got.err)
	require.Equal(t, []string{
		`{"type":"block-start","index":0,"blockType":"text"}`,
		`{"type":"text-delta","index":0,"text":"The request established a durable compaction premise."}`,
		`{"type":"block-end","index":0,"block":{"type":"text","text":"The request established a durable compaction premise."}}`,
		`{"type":"usage","usage":{"inputTokens":20,"outputTokens":4}}`,
		`{"type":"finish","reason":{"kind":"stop"}}`,
	}, got.chunks)
}

func TestCompactionSummaryForms(t *testing.T) {
	summary := func(data string) []session.Event {
		return parseEvents(t, jsonl(turnStart(1), stepStart(1, 3), `{"type":"compaction/summary","data":`+data+`}`))
	}
	base := `"compactionId":"c","shadowedRange":{"start":0,"end":0},"shadowedSeqs":[0],"shadowedTokenCount":1,"provider":"p","model":"m"`

	script, err := Script(summary(`{` + base + `,"summary":[{"type":"text","text":"s"}]}`))
	require.NoError(t, err)
	require.Empty(t, script, "no llmStreamCall: not a stream call")

	script, err = Script(summary(`{` + base + `,"llmStreamCall":true,"summary":[{"type":"reasoning","text":"r"},{"type":"text","text":""}]}`))
	require.NoError(t, err)
	require.Len(t, script, 1)
	o, _ := script[0].Origin()
	require.Equal(t, Origin{Turn: 1, Step: 3, Attempt: 1, FirstSeq: 2, LastSeq: 2, Compaction: true}, o)
	var types []string
	for _, c := range script[0].Chunks() {
		types = append(types, string(c.Type()))
	}
	require.Equal(t, []string{"block-start", "reasoning-delta", "block-start", "block-end", "block-end", "finish"}, types)

	script, err = Script(summary(`{` + base + `,"llmStreamCall":true,"rawOutput":"plain"}`))
	require.NoError(t, err)
	require.Equal(t, `{"type":"text-delta","index":0,"text":"plain"}`, script[0].Chunk(1).JSON().String())

	_, err = Script(summary(`{` + base + `,"llmStreamCall":true}`))
	require.ErrorContains(t, err, "without rawOutput or summary")
}

func TestParseOverride(t *testing.T) {
	chunks := `[{"type":"block-start","index":0,"blockType":"text"},{"type":"finish","reason":{"kind":"stop"}}]`
	o, err := ParseOverride([]byte(`{"patches":[{"at":1,"entry":{"kind":"hang","readyFile":"r"}},{"at":3,"entry":{"kind":"chunks","chunks":` + chunks + `}}]}`))
	require.NoError(t, err)
	script := []Entry{ChunksEntry(nil), ChunksEntry(nil), ChunksEntry(nil)}
	out, err := o.Apply(script)
	require.NoError(t, err)
	require.Len(t, out, 4, "a patch at the end appends")
	require.Equal(t, KindHang, out[1].Kind())
	require.Equal(t, "r", out[1].ReadyFile())
	require.Equal(t, 2, out[3].NumChunks())
	require.Equal(t, KindChunks, script[1].Kind(), "Apply leaves its input alone")

	_, err = o.Apply(script[:1])
	require.ErrorContains(t, err, "beyond the 2 scripted calls")

	arr, err := ParseOverride([]byte(` [ {"kind":"throw","chunks":[],"message":"m","code":"C"} ] `))
	require.NoError(t, err)
	out, err = arr.Apply(script)
	require.NoError(t, err)
	require.Len(t, out, 1, "a bare array replaces the script")
	require.Equal(t, messages.LlmFailure{Message: "m", Code: "C"}, out[0].Failure())

	zero, err := Override{}.Apply(script)
	require.NoError(t, err)
	require.Len(t, zero, 3)
	require.True(t, Override{}.IsZero())

	for _, tc := range []struct{ in, want string }{
		{``, "empty"},
		{`"x"`, "neither"},
		{`[{"kind":"sleep"}]`, `unknown entry kind "sleep"`},
		{`[{"chunks":[]}]`, "no kind"},
		{`[{"kind":"chunks"}]`, "needs chunks"},
		{`[{"kind":"chunks","chunks":[],"code":"X"}]`, "field code does not belong to a chunks entry"},
		{`[{"kind":"hang","chunks":[]}]`, "field chunks does not belong to a hang entry"},
		{`[{"kind":"throw","message":"m"}]`, "needs a code"},
		{`[{"kind":"chunks","chunks":[{"type":"nope"}]}]`, `chunk 0: messages: unknown chunk type "nope"`},
		{`[{"kind":"chunks","chunks":[],"extra":1}]`, `unknown field "extra"`},
		{`{"patches":[{"entry":{"kind":"hang"}}]}`, "at must be"},
		{`{"patches":[{"at":-1,"entry":{"kind":"hang"}}]}`, "at must be"},
		{`{"patches":[{"at":0}]}`, "no entry"},
		{`{}`, "needs patches"},
		{`[] []`, "trailing"},
	} {
		_, err := ParseOverride([]byte(tc.in))
		require.ErrorContains(t, err, tc.want, "input %s", tc.in)
	}

	_, err = ReadOverride(filepath.Join(t.TempDir(), "none.json"))
	require.ErrorContains(t, err, "read override")
}

func TestFromFileErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := FromFile(filepath.Join(dir, "missing.jsonl"), Options{})
	require.ErrorContains(t, err, "replay:")

	path := filepath.Join(dir, "session.jsonl")
	require.NoError(t, os.WriteFile(path, jsonl(turnStart(1), stepStart(1, 1), chunk(1, 1, cStop)), 0o600))
	_, err = FromFile(path, Options{OverridePath: filepath.Join(dir, "absent.json")})
	require.ErrorContains(t, err, "read override", "an explicit override must exist")

	require.NoError(t, os.WriteFile(filepath.Join(dir, OverrideFileName), []byte(`{"patches":[{"at":5,"entry":{"kind":"hang"}}]}`), 0o600))
	_, err = FromFile(path, Options{})
	require.ErrorContains(t, err, "beyond")
	p, err := FromFile(path, Options{NoOverride: true})
	require.NoError(t, err)
	require.Equal(t, 1, p.Len())
}
