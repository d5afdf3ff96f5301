package replay

import (
	"fmt"
	"slices"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// Script returns the recorded stream calls of a session log, in the order
// they were made: its assistant/chunk groups and the summariser streams of
// its compaction/summary events with llmStreamCall: true.
//
// Chunks are grouped by (turn, step) and by attempt. A group is open from
// its first chunk until its finish chunk; a chunk of a (turn, step) with no
// open group starts the next attempt, so an error finish followed by more
// chunks of the same step is the failed attempt followed by its retry. A
// turn/end closes the open groups of its turn. Groups are ordered by their
// first chunk; chunks of other events in between (hooks, foreign events)
// are skipped, not split on.
//
// Every group must end in a finish, except one whose turn ended aborted or
// interrupted (a user cancel or a crash cut the stream: the recording has
// no finish, the harness writes none), and except the last stream call of
// the log, which a crash may have cut before its turn was closed. Any other
// group without a finish is an error naming its turn, step, attempt and
// seqs. Such an open group is served as its chunks followed by a hang until
// the call is cancelled (Entry.Open), which is where a replay driver
// cancels.
//
// The summariser stream of a compaction is rebuilt in a canonical form,
// since the log keeps the summary, not its chunks: for each block of
// rawOutput (else summary) in order, block-start and one delta carrying the
// whole text (or the tool call's id, name and arguments; none for an empty
// text), then every block-end in index order, the recorded usage if any,
// and a stop finish. It sits in the script at the position of its
// compaction/summary event.
//
// The events are read, not retained; the entries share the immutable
// chunks.
func Script(events []session.Event) ([]Entry, error) {
	type key struct{ turn, step int64 }
	var entries []Entry
	open := map[key]int{}                  // (turn, step) → index in entries of its open group
	attempts := map[key]int{}              // groups seen per (turn, step)
	ended := map[int]session.TurnEndKind{} // open group → how its turn ended
	var turn, step int64                   // of the last step/start, for summariser origins
	for _, ev := range events {
		switch ev.Type() {
		case session.TypeAssistantChunk:
			p, ok := ev.Payload().(session.AssistantChunk)
			if !ok {
				return nil, fmt.Errorf("replay: seq %d: assistant/chunk data does not decode", ev.Seq())
			}
			k := key{p.Turn, p.Step}
			i, isOpen := open[k]
			if !isOpen {
				attempts[k]++
				entries = append(entries, Entry{kind: KindChunks, recorded: true,
					origin: Origin{Turn: p.Turn, Step: p.Step, Attempt: attempts[k], FirstSeq: ev.Seq()}})
				i = len(entries) - 1
				open[k] = i
			}
			e := &entries[i]
			e.chunks = append(e.chunks, p.Chunk)
			e.origin.LastSeq = ev.Seq()
			if p.Chunk.Type() == messages.ChunkFinish {
				delete(open, k)
			}
		case session.TypeStepStart:
			turn, step, _ = ev.TurnStep()
		case session.TypeTurnEnd:
			p, ok := ev.Payload().(session.TurnEnd)
			if !ok {
				return nil, fmt.Errorf("replay: seq %d: turn/end data does not decode", ev.Seq())
			}
			for k, i := range open {
				if k.turn == p.Turn {
					ended[i] = p.Reason.Kind
					delete(open, k)
				}
			}
		case session.TypeCompactionSum:
			e, ok, err := summaryEntry(ev)
			if err != nil {
				return nil, err
			}
			if ok {
				e.origin.Turn, e.origin.Step = turn, step
				entries = append(entries, e)
			}
		}
	}
	var unfinished []int
	for _, i := range open {
		unfinished = append(unfinished, i)
	}
	for i, kind := range ended {
		if kind != session.EndAborted && kind != session.EndInterrupted {
			unfinished = append(unfinished, i)
		}
	}
	slices.Sort(unfinished)
	for _, i := range unfinished {
		if i == len(entries)-1 {
			continue // the last stream call: a crash may have cut it
		}
		o := entries[i].origin
		return nil, fmt.Errorf("replay: the stream of turn %d step %d (attempt %d, seqs %d..%d) does not end in a finish chunk",
			o.Turn, o.Step, o.Attempt, o.FirstSeq, o.LastSeq)
	}
	for i := range entries {
		entries[i].chunks = slices.Clip(entries[i].chunks)
	}
	return entries, nil
}

// summaryEntry rebuilds the summariser stream of a compaction/summary
// event; ok is false when the summary did not come from a stream call.
func summaryEntry(ev session.Event) (e Entry, ok bool, err error) {
	d := ev.Data()
	if v, has := d.Field("llmStreamCall"); !has {
		return Entry{}, false, nil
	} else if b, isBool := v.AsBool(); !isBool || !b {
		return Entry{}, false, nil
	}
	fail := func(format string, args ...any) (Entry, bool, error) {
		return Entry{}, false, fmt.Errorf("replay: seq %d: compaction/summary: "+format, append([]any{ev.Seq()}, args...)...)
	}
	out, has := d.Field("rawOutput")
	if !has {
		out, has = d.Field("summary")
	}
	var blocks []messages.ContentBlock
	switch {
	case !has:
		return fail("llmStreamCall without rawOutput or summary")
	case out.Kind() == messages.KindString:
		s, _ := out.AsString()
		blocks = append(blocks, messages.TextBlock(s))
	case out.Kind() == messages.KindArray:
		for bj := range out.Elements() {
			b, err := messages.ParseContentBlock(bj)
			if err != nil {
				return fail("%v", err)
			}
			blocks = append(blocks, b)
		}
	default:
		return fail("rawOutput is neither blocks nor a string")
	}
	var chunks []messages.StreamChunk
	for i, b := range blocks {
		chunks = append(chunks, messages.BlockStartChunk(i, b.Type()))
		switch b.Type() {
		case messages.BlockText:
			if b.Text() != "" {
				chunks = append(chunks, messages.TextDeltaChunk(i, b.Text()))
			}
		case messages.BlockReasoning:
			if b.Text() != "" {
				chunks = append(chunks, messages.ReasoningDeltaChunk(i, b.Text()))
			}
		case messages.BlockToolCall:
			chunks = append(chunks, messages.NamedToolCallDeltaChunk(i, b.ID(), b.Name(), b.Arguments()))
		default:
			return fail("a %s block has no stream form", b.Type())
		}
	}
	for i, b := range blocks {
		chunks = append(chunks, messages.BlockEndChunk(i, b))
	}
	if uj, has := d.Field("usage"); has {
		u, err := messages.ParseTokenUsage(uj)
		if err != nil {
			return fail("%v", err)
		}
		chunks = append(chunks, messages.UsageChunk(u))
	}
	chunks = append(chunks, messages.FinishChunk(messages.FinishReason{Kind: messages.FinishStop}, messages.JSON{}))
	return Entry{kind: KindChunks, chunks: chunks, recorded: true,
		origin: Origin{Attempt: 1, FirstSeq: ev.Seq(), LastSeq: ev.Seq(), Compaction: true}}, true, nil
}
