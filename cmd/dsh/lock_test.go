package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// Process tests of the writer lock: a session has one writer at a time,
// whichever processes try (dsh run, dsh member, dsh log repair).

// inUseLine matches the one line a refused writer prints: the session and
// the holder, a pid and a host.
var inUseLine = regexp.MustCompile(`^dsh: session (\S+) is in use by (?:.* )?pid (\d+) on \S+$`)

// dshCmd is a dsh command with the synthetic model.
func dshCmd(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "DEEPSEEK_API_KEY=")
	return cmd
}

// userTexts returns the text of every user message in the log at path,
// which must be valid, without a torn tail and balanced.
func userTexts(t *testing.T, path string) []string {
	t.Helper()
	f, err := session.ReadFile(path)
	require.NoError(t, err, "the log stays valid")
	require.Nil(t, f.Torn, "no torn tail")
	l := mustLog(t, f)
	require.NoError(t, session.CheckTrace(f.Events))
	_, _, open := l.OpenTurn()
	require.False(t, open)
	var out []string
	for _, m := range l.DeriveMessages().Slice() {
		if m.Role() != messages.RoleUser {
			continue
		}
		for _, b := range m.Content() {
			out = append(out, b.Text())
		}
	}
	return out
}

// requireRefused checks that a process exited non-zero with exactly one
// stderr line, the in-use line for session id.
func requireRefused(t *testing.T, err error, stderr, id string) {
	t.Helper()
	require.Error(t, err, "the refused writer fails")
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.NotZero(t, ee.ExitCode())
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	require.Len(t, lines, 1, "one stderr line: %q", stderr)
	m := inUseLine.FindStringSubmatch(lines[0])
	require.NotNil(t, m, "the in-use line: %q", lines[0])
	require.Equal(t, id, m[1])
}

// Two `dsh run --session S` started at once on one directory, 20 times:
// the first to take S's writer lock runs its turn; the other, if it came
// while the lock was held, exits 1 having changed nothing, with the one
// line "session S is in use by pid N on HOST". Every trial leaves a valid
// log holding exactly the turns of the processes that exited 0. (dsh run
// --session never creates a session: an id not on disk is "no session",
// so only stored sessions race.)
func TestTwoDshRunsOfOneSessionNeverInterleave(t *testing.T) {
	bin := buildDsh(t)
	work := t.TempDir()
	const trials = 20
	refusedTrials := 0
	for trial := range trials {
		dir := t.TempDir()
		seed := dshCmd(bin, "run", "--dir", dir, "--workdir", work, "--json", "seed")
		out, err := seed.Output()
		require.NoError(t, err)
		var res runResult
		require.NoError(t, json.Unmarshal(out, &res), "%s", out)
		id := res.Session
		path := findLog(t, dir)
		require.NotEmpty(t, path)

		type proc struct {
			prompt         string
			cmd            *exec.Cmd
			stdout, stderr bytes.Buffer
			err            error
		}
		procs := make([]*proc, 2)
		var wg sync.WaitGroup
		for i := range procs {
			p := &proc{prompt: fmt.Sprintf("trial %d writer %d", trial, i)}
			// A turn that streams for a while (40 deltas at 400/s) keeps
			// the lock held while the other process starts.
			p.cmd = dshCmd(bin, "run", "--dir", dir, "--workdir", work, "--session", id, "--synthetic-speed", "400", p.prompt)
			p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
			procs[i] = p
		}
		for _, p := range procs {
			require.NoError(t, p.cmd.Start())
		}
		for _, p := range procs {
			wg.Go(func() { p.err = p.cmd.Wait() })
		}
		wg.Wait()

		texts := userTexts(t, path)
		want := []string{"seed"}
		refused := 0
		for _, p := range procs {
			if p.err == nil {
				require.Contains(t, texts, p.prompt, "trial %d: a run that exited 0 has its turn on disk", trial)
				require.Equal(t, "session "+id+"\n", p.stderr.String())
				want = append(want, p.prompt)
				continue
			}
			requireRefused(t, p.err, p.stderr.String(), id)
			require.Empty(t, p.stdout.String())
			refused++
		}
		require.ElementsMatch(t, want, texts, "trial %d: exactly the turns of the runs that succeeded", trial)
		require.Less(t, refused, 2, "trial %d: one of the two always gets the session", trial)
		refusedTrials += refused
	}
	t.Logf("%d of %d trials refused the second writer", refusedTrials, trials)
	require.Positive(t, refusedTrials, "the runs overlapped at least once")
}

// Defect 2: a cluster member holds a session on a shared directory; a
// plain `dsh run --dir SHARED --session ID` is refused with the in-use
// line naming the member and changes nothing, and the cluster's next
// turn of that session completes and reaches disk.
func TestDshRunRefusesASessionAMemberHolds(t *testing.T) {
	bin := buildDsh(t)
	dir := t.TempDir()
	port := freePort(t)
	peers := "127.0.0.1:" + strconv.Itoa(port)
	member := dshCmd(bin, "member", "--dir", dir, "--provider-port", strconv.Itoa(port), "--peers", peers,
		"--refresh", "100ms", "--json")
	stdout, err := member.StdoutPipe()
	require.NoError(t, err)
	member.Stderr = io.Discard
	require.NoError(t, member.Start())
	t.Cleanup(func() {
		_ = member.Process.Kill()
		_ = member.Wait()
	})
	up := json.NewDecoder(stdout)
	var ev memberEvent
	require.NoError(t, up.Decode(&ev))
	require.Equal(t, "up", ev.Event)
	go func() { _, _ = io.Copy(io.Discard, stdout) }()

	out, err := dshCmd(bin, "run", "--peers", peers, "--json", "hello").Output()
	require.NoError(t, err, "%s", out)
	var first runResult
	require.NoError(t, json.Unmarshal(out, &first), "%s", out)
	id := first.Session
	path := findLog(t, dir)
	require.NotEmpty(t, path)
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	run := dshCmd(bin, "run", "--dir", dir, "--workdir", t.TempDir(), "--session", id, "x")
	var rout, rerr bytes.Buffer
	run.Stdout, run.Stderr = &rout, &rerr
	err = run.Run()
	requireRefused(t, err, rerr.String(), id)
	require.Contains(t, rerr.String(), "is in use by member ", "the holder is the member")
	require.Contains(t, rerr.String(), " pid "+strconv.Itoa(member.Process.Pid)+" on ")
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after, "the refused run changed nothing")

	out, err = dshCmd(bin, "run", "--peers", peers, "--session", id, "--json", "again").Output()
	require.NoError(t, err, "%s", out)
	var second runResult
	require.NoError(t, json.Unmarshal(out, &second), "%s", out)
	require.Equal(t, "completed", second.End)
	require.Equal(t, []string{"hello", "again"}, userTexts(t, path), "the cluster's turn reached disk")
}

// Defect 9: `dsh log repair` refuses a file whose session a live process
// writes — here a `dsh chat` holding it open on a plain directory, as an
// embedder or a dsh run would —: exit 1, the one in-use line naming that
// process, the file unchanged. Once the writer has gone, the repair runs.
func TestLogRepairRefusesAFileAWriterHolds(t *testing.T) {
	bin := buildDsh(t)
	dir, work := t.TempDir(), t.TempDir()
	out, err := dshCmd(bin, "run", "--dir", dir, "--workdir", work, "--json", "seed").Output()
	require.NoError(t, err)
	var res runResult
	require.NoError(t, json.Unmarshal(out, &res), "%s", out)
	path := findLog(t, dir)
	require.NotEmpty(t, path)
	seeds := endSeeds(path)
	require.GreaterOrEqual(t, seeds, 0)

	chat := dshCmd(bin, "chat", "--dir", dir, "--workdir", work, "--session", res.Session)
	stdin, err := chat.StdinPipe()
	require.NoError(t, err)
	stderr, err := chat.StderrPipe()
	require.NoError(t, err)
	chat.Stdout = io.Discard
	require.NoError(t, chat.Start())
	t.Cleanup(func() {
		_ = chat.Process.Kill()
		_ = chat.Wait()
	})
	// chat says "session ID under DIR; ..." once the session is open.
	sc := bufio.NewScanner(stderr)
	require.True(t, sc.Scan(), "chat said nothing: %v", sc.Err())
	require.True(t, strings.HasPrefix(sc.Text(), "session "+res.Session+" under "), sc.Text())
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	// Resuming appends a session/end-seed, written behind: the chat says
	// it is open before that reaches the file. Wait for it, so that the
	// comparison below sees only what the repair could have done.
	require.Eventually(t, func() bool { return endSeeds(path) > seeds }, time.Minute, 10*time.Millisecond,
		"the chat never wrote its session/end-seed")
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	cmd := dshCmd(bin, "log", "repair", path)
	var rout, rerr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &rout, &rerr
	err = cmd.Run()
	requireRefused(t, err, rerr.String(), res.Session)
	require.Contains(t, rerr.String(), fmt.Sprintf(" pid %d on ", chat.Process.Pid), "the holder is the chat")
	require.Empty(t, rout.String())
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after, "the refused repair changed nothing")

	require.NoError(t, stdin.Close())
	require.NoError(t, chat.Wait(), "end of input leaves the chat")
	rout.Reset()
	rerr.Reset()
	cmd = dshCmd(bin, "log", "repair", path)
	cmd.Stdout, cmd.Stderr = &rout, &rerr
	require.NoError(t, cmd.Run(), "%s", rerr.String())
	require.Contains(t, rout.String(), "nothing to repair")
}

// endSeeds counts the session/end-seed events in the log at path, or
// returns -1 while it cannot be read.
func endSeeds(path string) int {
	f, err := session.ReadFile(path)
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range f.Events {
		if e.Type() == session.TypeEndSeed {
			n++
		}
	}
	return n
}
