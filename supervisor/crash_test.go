package supervisor

import (
	"bufio"
	"context"
	"fmt"
	"iter"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/messages"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/session"
)

const crashDirEnv = "DSH_SUPERVISOR_CRASH_DIR"

// crashChild is the child process of TestKilledMidTurn, run by TestMain
// when crashDirEnv is set: it runs a host on dir, reports each turn
// WaitIdle made durable, starts a slow turn, says so, and waits to be
// killed. Any failure panics (a non-zero exit the parent sees as a
// child that never reached mid-turn).
func crashChild(dir string) {
	userMsg := func(text string) messages.Message {
		m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(text)}, messages.UserSource())
		if err != nil {
			panic(err)
		}
		return m
	}
	ctx := context.Background()
	p, err := synthetic.New(synthetic.Config{Seed: 5, TextChunks: 4000, TokensPerSecond: 2000})
	if err != nil {
		panic(err)
	}
	fast, err := synthetic.New(synthetic.Config{Seed: 5, TextChunks: 10})
	if err != nil {
		panic(err)
	}
	h, err := Open(Config{Dir: dir, Provider: &switchProvider{fast: fast, slow: p}})
	if err != nil {
		panic(err)
	}
	id, err := h.Create(ctx, CreateOptions{ID: "crashy"})
	if err != nil {
		panic(err)
	}
	for i := 1; i <= 3; i++ {
		if err := h.Followup(ctx, id, userMsg(fmt.Sprintf("turn %d", i))); err != nil {
			panic(err)
		}
		if err := h.WaitIdle(ctx, id); err != nil {
			panic(err)
		}
		fmt.Fprintf(os.Stdout, "durable %d\n", i) // the child's protocol with its parent
	}
	if err := h.Followup(ctx, id, userMsg("slow turn")); err != nil {
		panic(err)
	}
	sub, err := h.Subscribe(ctx, id, 0)
	if err != nil {
		panic(err)
	}
	chunks := 0
	for ev := range sub.Events() {
		if tp, ok := ev.Payload().(session.TurnStart); ok && tp.Turn == 4 {
			chunks = 1
		}
		if chunks > 0 && ev.Type() == session.TypeAssistantChunk {
			chunks++
			if chunks == 50 {
				// Part of the open turn is on disk when the kill comes.
				if _, err := h.Flush(ctx, id); err != nil {
					panic(err)
				}
				fmt.Fprintln(os.Stdout, "midturn")
			}
		}
	}
	select {} // killed here
}

func TestKilledMidTurn(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	durable := 0
	sc := bufio.NewScanner(out)
	mid := false
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "durable "); ok {
			durable, err = strconv.Atoi(n)
			require.NoError(t, err)
		}
		if line == "midturn" {
			mid = true
			break
		}
	}
	require.True(t, mid, "child never reached mid-turn")
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.Equal(t, 3, durable)

	files := logFiles(t, dir)
	require.Len(t, files, 1)
	h := openHost(t, Config{Dir: dir})
	defer func() { require.NoError(t, h.Close(ctx)) }()
	require.NoError(t, h.Resume(ctx, "crashy"))
	evs, err := h.Events(ctx, "crashy", 0)
	require.NoError(t, err)
	all := evs
	require.NoError(t, session.CheckTrace(all))
	require.Empty(t, session.InterruptedTurnClosers(all))
	var ends []session.TurnEndKind
	for _, ev := range all {
		if p, ok := ev.Payload().(session.TurnEnd); ok {
			ends = append(ends, p.Reason.Kind)
		}
	}
	// Every turn WaitIdle reported durable is there; the turn the kill cut
	// was partly flushed and is closed {interrupted} by repair.
	require.Equal(t, []session.TurnEndKind{session.EndCompleted, session.EndCompleted, session.EndCompleted,
		session.EndInterrupted}, ends)
	require.NoError(t, h.Followup(ctx, "crashy", userMsg(t, "after the crash")))
	require.NoError(t, h.WaitIdle(ctx, "crashy"))
	evs, err = h.Events(ctx, "crashy", 0)
	require.NoError(t, err)
	require.NoError(t, session.CheckTrace(evs))
	require.Equal(t, session.EndCompleted, lastTurnEnd(t, evs).Kind)
}

// switchProvider streams fast until the history reaches the fourth turn.
type switchProvider struct{ fast, slow llm.Provider }

func (s *switchProvider) Name() string { return s.fast.Name() }

func (s *switchProvider) Stream(ctx context.Context, req llm.Request) iter.Seq2[messages.StreamChunk, error] {
	if req.NumMessages() >= 7 {
		return s.slow.Stream(ctx, req)
	}
	return s.fast.Stream(ctx, req)
}
