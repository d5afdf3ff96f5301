package agent

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

var rewriteTranscripts = flag.Bool("rewrite", false, "rewrite testdata/driver/*.txt with the effects the driver produces")

// Driver transcripts (testdata/driver/*.txt), in the style of etcd raft's
// data-driven tests: each file is a sequence of commands fed to the driver
// through the rig, each followed by "----" and the effects it produced, one
// per line, up to a blank line. Lines starting with # are comments. A file
// may start with a "config" command. Commands:
//
//	config retry            a retry policy with a 1 ms backoff and no jitter
//	followup TEXT           queue TEXT in next-turn and wake the driver
//	text TEXT               stream a text answer TEXT on the running call (no finish)
//	chunk TEXT              stream one text block start and one delta TEXT
//	end stop                end the running call: stop
//	end error CODE MESSAGE  end it with a failed attempt
//	end cancelled           end it as a cancelled stream (the abort's answer)
//	cancel [keep-inbox]     Cancel with cause user
//	timer                   fire the armed retry timer
//	system TEXT             SetSystem
//	log                     the log's event types (a run of chunks as one)
//	ends                    the turn/end reasons of the log
//
// After the last command of a file the log must pass session.CheckTrace and
// the driver must be idle. go test -run TestDriverTranscripts -rewrite
// rewrites the expected effects.
func TestDriverTranscripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "driver", "*.txt"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			got := runTranscript(t, string(data))
			if *rewriteTranscripts {
				require.NoError(t, os.WriteFile(f, []byte(got), 0o644))
				return
			}
			require.Equal(t, string(data), got)
		})
	}
}

// runTranscript runs the commands of a transcript and returns it with the
// effects each produced in place of the expected ones. Blocks are
// separated by blank lines; a block is comment lines, one command, and
// "----" with the expected effects.
func runTranscript(t *testing.T, data string) string {
	var r *rig
	var blocks []string
	for i, block := range strings.Split(strings.TrimRight(data, "\n"), "\n\n") {
		lines := strings.Split(block, "\n")
		var b strings.Builder
		for len(lines) > 0 && strings.HasPrefix(lines[0], "#") {
			b.WriteString(lines[0] + "\n")
			lines = lines[1:]
		}
		require.NotEmpty(t, lines, "block %d has no command", i+1)
		cmd, arg, _ := strings.Cut(lines[0], " ")
		if r == nil {
			cfg := driverConfig{}
			if cmd == "config" {
				require.Equal(t, "retry", arg)
				cfg.Retry = llm.RetryPolicy{InitialDelay: time.Millisecond, JitterRatio: -1}
			}
			r = newRig(t, cfg)
		}
		r.out = nil
		b.WriteString(lines[0] + "\n----\n")
		for _, s := range transcriptStep(t, r, cmd, arg) {
			b.WriteString(s + "\n")
		}
		blocks = append(blocks, b.String())
	}
	require.NotNil(t, r, "a transcript without commands")
	require.NoError(t, session.CheckTrace(r.l.Events().Slice()))
	require.True(t, r.d.Idle(), "the driver is idle at the end")
	require.Equal(t, StatusIdle, r.d.Status())
	return strings.Join(blocks, "\n")
}

// transcriptStep runs one command and returns what it produced.
func transcriptStep(t *testing.T, r *rig, cmd, arg string) []string {
	switch cmd {
	case "config":
	case "followup":
		r.followup(arg)
	case "text":
		body := textResponse(arg).chunks
		r.chunks(body[:len(body)-1]...)
	case "chunk":
		r.chunks(messages.BlockStartChunk(0, messages.BlockText), messages.TextDeltaChunk(0, arg))
	case "end":
		kind, rest, _ := strings.Cut(arg, " ")
		switch kind {
		case "stop":
			r.end(messages.FinishStop, messages.LlmFailure{}, false)
		case "error":
			code, msg, _ := strings.Cut(rest, " ")
			r.end(messages.FinishError, messages.LlmFailure{Code: code, Message: msg}, false)
		case "cancelled":
			r.end(messages.FinishAborted, messages.LlmFailure{}, true)
		default:
			t.Fatalf("end %q", arg)
		}
	case "cancel":
		r.run(r.input(Cancel{Cause: session.CancelCause{Kind: session.CauseUser}, KeepInbox: arg == "keep-inbox"}))
	case "timer":
		r.run(r.input(retryTimerFired{Gen: r.timer}))
	case "system":
		r.run(r.input(SetSystem{Prompt: arg}))
	case "log":
		return r.logTypes()
	case "ends":
		var out []string
		for _, e := range turnEnds(r.l.Events().Slice()) {
			s := string(e.Kind)
			if e.Cause.Kind != "" {
				s += " " + string(e.Cause.Kind)
			}
			if e.Error.Code != "" {
				s += " " + e.Error.Code
			}
			out = append(out, s)
		}
		return out
	default:
		t.Fatalf("unknown command %q", cmd)
	}
	return r.out
}
