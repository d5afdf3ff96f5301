package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// memberEvent is one JSON line of `dsh member --json`.
type memberEvent struct {
	Event   string   `json:"event"`
	Address string   `json:"address"`
	Members []string `json:"members"`
}

// freePort returns a port that was free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return port
}

// Two `dsh member` processes on 127.0.0.1 sharing a directory find each
// other through the automanaged endpoints (served on 127.0.0.1 only), say
// so as JSON lines on stdout — and nothing else goes to stdout, no banner
// —; `dsh run --peers` runs two turns of one session on them; then one
// member is killed with SIGKILL and the other sees it leave, and SIGTERM
// makes the survivor leave and exit 0.
func TestMemberProcessesFormAClusterRunTurnsAndSeeADeadMemberLeave(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "dsh")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	dir := t.TempDir()
	ports := []int{freePort(t), freePort(t)}
	peers := "127.0.0.1:" + strconv.Itoa(ports[0]) + ",127.0.0.1:" + strconv.Itoa(ports[1])
	type proc struct {
		cmd    *exec.Cmd
		events chan memberEvent
		lines  chan string // every stdout line
	}
	procs := make([]*proc, 2)
	for i := range procs {
		cmd := exec.Command(bin, "member", "--dir", dir, "--provider-port", strconv.Itoa(ports[i]),
			"--peers", peers, "--refresh", "100ms", "--json")
		cmd.Env = append(os.Environ(), "DEEPSEEK_API_KEY=")
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = io.Discard
		require.NoError(t, cmd.Start())
		p := &proc{cmd: cmd, events: make(chan memberEvent, 64), lines: make(chan string, 64)}
		procs[i] = p
		go func() {
			defer close(p.lines)
			defer close(p.events)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				p.lines <- sc.Text()
				var ev memberEvent
				if json.Unmarshal(sc.Bytes(), &ev) == nil {
					p.events <- ev
				}
			}
		}()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	// wait returns the first event of p satisfying ok.
	wait := func(p *proc, what string, ok func(memberEvent) bool) memberEvent {
		t.Helper()
		timeout := time.After(60 * time.Second)
		for {
			select {
			case ev, open := <-p.events:
				require.True(t, open, "stdout closed before %s", what)
				if ok(ev) {
					return ev
				}
			case <-timeout:
				t.Fatalf("no %s", what)
			}
		}
	}
	addrs := make([]string, 2)
	for i, p := range procs {
		up := wait(p, "up", func(ev memberEvent) bool { return ev.Event == "up" })
		require.True(t, strings.HasPrefix(up.Address, "127.0.0.1:"), up.Address)
		addrs[i] = up.Address
		if len(up.Members) != 2 {
			wait(p, "two members", func(ev memberEvent) bool { return len(ev.Members) == 2 })
		}
	}
	// The provider endpoint answers on 127.0.0.1.
	res, err := http.Get("http://127.0.0.1:" + strconv.Itoa(ports[0]) + "/_health")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.NoError(t, res.Body.Close())

	// dsh run --peers runs turns on the cluster, wherever the session
	// lives, and prints the usual JSON result.
	var first runResult
	for i, prompt := range []string{"hello", "again"} {
		args := []string{"run", "--peers", peers, "--json"}
		if i > 0 {
			args = append(args, "--session", first.Session)
		}
		out, err := exec.Command(bin, append(args, prompt)...).Output()
		require.NoError(t, err, "dsh run --peers: %s", out)
		var res runResult
		require.NoError(t, json.Unmarshal(out, &res), "%s", out)
		require.Equal(t, "completed", res.End)
		require.NotEmpty(t, res.Text)
		if i == 0 {
			first = res
		} else {
			require.Equal(t, first.Session, res.Session)
		}
	}
	logs, err := filepath.Glob(filepath.Join(dir, "*", first.Session, "session.jsonl.zstd"))
	require.NoError(t, err)
	require.Len(t, logs, 1)
	out, err = exec.Command(bin, "log", "verify", logs[0]).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "2 turns")

	// dsh chat --peers too: a turn, /messages, /quit.
	chat := exec.Command(bin, "chat", "--peers", peers, "--session", first.Session)
	chat.Stdin = strings.NewReader("one more\n/wait\n/messages\n/quit\n")
	out, err = chat.Output()
	require.NoError(t, err, "dsh chat --peers: %s", out)
	require.Equal(t, 6, strings.Count(string(out), `"role":`), "three turns' messages: %s", out)

	// kill -9 the second; the first sees it leave.
	require.NoError(t, procs[1].cmd.Process.Kill())
	_ = procs[1].cmd.Wait()
	ev := wait(procs[0], "the dead member leaving", func(ev memberEvent) bool { return ev.Event == "members" && len(ev.Members) == 1 })
	require.Equal(t, []string{addrs[0]}, ev.Members)

	// SIGTERM: the survivor leaves and exits 0.
	require.NoError(t, procs[0].cmd.Process.Signal(syscall.SIGTERM))
	wait(procs[0], "left", func(ev memberEvent) bool { return ev.Event == "left" })
	require.NoError(t, procs[0].cmd.Wait())
	// Every stdout line was one of the member's JSON events.
	for range procs[0].events {
	}
	for line := range procs[0].lines {
		var ev memberEvent
		require.NoError(t, json.Unmarshal([]byte(line), &ev), "stdout line %q", line)
		require.NotEmpty(t, ev.Event)
	}
}
