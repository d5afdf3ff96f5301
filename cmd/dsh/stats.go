package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// logStats is what `dsh log stats` reports; it is also its --json shape.
type logStats struct {
	File          string           `json:"file,omitempty"`
	Store         string           `json:"store,omitempty"` // instead of File: the session is in this store
	Compressed    bool             `json:"compressed"`
	BytesOnDisk   int64            `json:"bytesOnDisk"`
	BytesJSONL    int64            `json:"bytesJsonl"`
	Ratio         float64          `json:"compressionRatio"`
	Session       string           `json:"session"`
	Events        int64            `json:"events"`
	Turns         int64            `json:"turns"`
	TurnEnds      map[string]int64 `json:"turnEnds"`
	Steps         int64            `json:"steps"`
	Derived       int              `json:"derivedMessages"`
	OpenTurn      int64            `json:"openTurn,omitempty"`
	ByType        map[string]int64 `json:"eventsByType"`
	InputTokens   int64            `json:"inputTokens"`
	OutputTokens  int64            `json:"outputTokens"`
	CacheRead     int64            `json:"cacheReadTokens"`
	CacheWrite    int64            `json:"cacheWriteTokens"`
	Reasoning     int64            `json:"reasoningTokens"`
	ToolCalls     int64            `json:"toolCalls"`
	ToolErrors    int64            `json:"toolErrors"`
	FirstTime     int64            `json:"firstTimeMs"`
	LastTime      int64            `json:"lastTimeMs"`
	PackedRecords int              `json:"records"`
}

func logStatsCmd(args []string, stdout, _ io.Writer) error {
	a, asJSON, err := statsFlags(args, stdout)
	if err != nil {
		return err
	}
	f, l, err := oneLog(a)
	if err != nil {
		return err
	}
	st := logStats{Compressed: f.Compressed, Session: string(l.ID()), Events: l.Len(),
		TurnEnds: map[string]int64{}, ByType: map[string]int64{}, Derived: l.DeriveMessages().Len()}
	if a.store != "" {
		// A store's session has no file of its own to size.
		st.Store = a.store
	} else {
		st.File = a.files[0]
		if fi, err := os.Stat(st.File); err == nil {
			st.BytesOnDisk = fi.Size()
		}
	}
	header := l.Header().JSON().String() + "\n"
	records := session.AppendRecords(nil, f.Events, session.PackChunks)
	st.BytesJSONL = int64(len(header) + len(records))
	for _, b := range records {
		if b == '\n' {
			st.PackedRecords++
		}
	}
	if st.BytesOnDisk > 0 {
		st.Ratio = float64(st.BytesJSONL) / float64(st.BytesOnDisk)
	}
	for i, e := range f.Events {
		if i == 0 {
			st.FirstTime, st.LastTime = e.Time(), e.Time()
		}
		st.FirstTime, st.LastTime = min(st.FirstTime, e.Time()), max(st.LastTime, e.Time())
		st.ByType[string(e.Type())]++
		switch p := e.Payload().(type) {
		case session.TurnStart:
			st.Turns++
		case session.TurnEnd:
			st.TurnEnds[string(p.Reason.Kind)]++
		case session.StepStart:
			st.Steps++
		case session.AssistantMessage:
			if p.HasUsage {
				addUsage(&st, p.Usage)
			}
		case session.ToolCall:
			st.ToolCalls++
		case session.ToolResult:
			if p.Message.Block(0).IsError() {
				st.ToolErrors++
			}
		}
	}
	if turn, _, open := l.OpenTurn(); open {
		st.OpenTurn = turn
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	return printStats(stdout, st)
}

func addUsage(st *logStats, u messages.TokenUsage) {
	st.InputTokens += u.InputTokens
	st.OutputTokens += u.OutputTokens
	st.CacheRead += u.CacheReadTokens.Or(0)
	st.CacheWrite += u.CacheWriteTokens.Or(0)
	st.Reasoning += u.ReasoningTokens.Or(0)
}

func printStats(w io.Writer, st logStats) error {
	p := &printer{w: w}
	enc := "plain JSONL"
	if st.Compressed {
		enc = "JSONL+zstd"
	}
	if st.Store != "" {
		p.line(0, "store      %s", st.Store)
		p.line(0, "size       %s of JSONL (%d records)", sizeText(st.BytesJSONL), st.PackedRecords)
	} else {
		p.line(0, "file       %s (%s)", st.File, enc)
		p.line(0, "size       %s on disk, %s of JSONL (%d records), ratio %.2f", sizeText(st.BytesOnDisk), sizeText(st.BytesJSONL), st.PackedRecords, st.Ratio)
	}
	p.line(0, "session    %s", st.Session)
	p.line(0, "events     %d, stamped over %.1f s (times are wall clock, not monotonic)", st.Events, float64(st.LastTime-st.FirstTime)/1000)
	ends := ""
	for _, k := range sortedKeys(st.TurnEnds) {
		ends += fmt.Sprintf(", %d %s", st.TurnEnds[k], k)
	}
	open := ""
	if st.OpenTurn > 0 {
		open = fmt.Sprintf(" (turn %d open)", st.OpenTurn)
	}
	p.line(0, "turns      %d%s%s, %d steps, %d derived messages", st.Turns, ends, open, st.Steps, st.Derived)
	p.line(0, "tools      %s, %s", plural(st.ToolCalls, "call"), plural(st.ToolErrors, "error"))
	p.line(0, "tokens     input %d, output %d, cache read %d, cache write %d, reasoning %d",
		st.InputTokens, st.OutputTokens, st.CacheRead, st.CacheWrite, st.Reasoning)
	p.line(0, "by type")
	keys := sortedKeys(st.ByType)
	sort.SliceStable(keys, func(i, j int) bool { return st.ByType[keys[i]] > st.ByType[keys[j]] })
	for _, k := range keys {
		p.line(1, "%-28s %d", k, st.ByType[k])
	}
	return p.err
}

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func sizeText(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
