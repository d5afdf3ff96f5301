package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/internal/testutil"
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
	bin := buildDsh(t)

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
	out, err := exec.Command(bin, "log", "verify", logs[0]).CombinedOutput()
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

// Without TLS, dsh member refuses a non-loopback --bind (before binding
// anything) unless --insecure; the TLS flags go all three together, and
// only with --peers for dsh run.
func TestMemberTLSFlagsAndThePlaintextRule(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"member", "--dir", dir, "--bind", "10.0.0.5"},
			"dsh: member: --bind 10.0.0.5 is not a loopback address: without TLS anyone who reaches it could create sessions and read every session's messages; give --tls-cert, --tls-key and --tls-ca, or --insecure"},
		{[]string{"member", "--dir", dir, "--tls-cert", "c.pem", "--tls-ca", "ca.pem"},
			"dsh: --tls-cert, --tls-key and --tls-ca go together: give all three or none"},
		{[]string{"member", "--dir", dir, "--insecure", "--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-ca", "ca.pem"},
			"dsh: member: --insecure goes without --tls-cert, --tls-key and --tls-ca"},
		{[]string{"run", "--dir", dir, "--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-ca", "ca.pem", "hello"},
			"dsh: --tls-cert, --tls-key and --tls-ca go with --peers"},
		{[]string{"run", "--peers", "127.0.0.1:1", "--tls-key", "k.pem", "hello"},
			"dsh: --tls-cert, --tls-key and --tls-ca go together: give all three or none"},
		{[]string{"chat", "--peers", "127.0.0.1:1", "--tls-ca", "ca.pem"},
			"dsh: --tls-cert, --tls-key and --tls-ca go together: give all three or none"},
	} {
		code, out, errOut := runDsh(tc.args...)
		require.Equal(t, exitUsage, code, "%v: %s", tc.args, errOut)
		require.Empty(t, out)
		require.Equal(t, tc.want+"\nRun 'dsh --help' for usage.\n", errOut, "%v", tc.args)
	}
	// A missing PEM file is one line, exit 1.
	code, _, errOut := runDsh("member", "--dir", dir, "--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-ca", "ca.pem")
	require.Equal(t, exitFailure, code)
	require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	require.Contains(t, errOut, "dsh: cluster: tls: open c.pem: no such file or directory")
}

// memberProc is a `dsh member --json` process: its JSON events and its
// stderr lines.
type memberProc struct {
	cmd    *exec.Cmd
	events chan memberEvent
	stderr chan string // closed at EOF
}

func startMemberProc(t *testing.T, bin string, args ...string) *memberProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"member", "--json"}, args...)...)
	cmd.Env = append(os.Environ(), "DEEPSEEK_API_KEY=")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &memberProc{cmd: cmd, events: make(chan memberEvent, 64), stderr: make(chan string, 64)}
	go func() {
		defer close(p.events)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev memberEvent
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				p.events <- ev
			}
		}
	}()
	go func() {
		defer close(p.stderr)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.stderr <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return p
}

// waitEvent returns the first event of p satisfying ok.
func (p *memberProc) waitEvent(t *testing.T, what string, ok func(memberEvent) bool) memberEvent {
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

// Two `dsh member` processes with --tls-cert, --tls-key and --tls-ca
// form a cluster; `dsh run --peers` with a certificate of their CA runs a
// turn on it; a connection with a self-signed certificate is refused and
// reported once on stderr however often it retries; a member given
// --insecure says so on stderr as it starts.
func TestMemberProcessesOverMutualTLS(t *testing.T) {
	bin := buildDsh(t)

	pki := t.TempDir()
	ca := testutil.NewCA(t, "dsh test CA")
	tlsArgs := func(name string) []string {
		cert, key, caFile := testutil.WritePEM(t, pki, name, testutil.Issue(t, ca, name), ca)
		return []string{"--tls-cert", cert, "--tls-key", key, "--tls-ca", caFile}
	}
	dir := t.TempDir()
	ports := []int{freePort(t), freePort(t)}
	peers := "127.0.0.1:" + strconv.Itoa(ports[0]) + ",127.0.0.1:" + strconv.Itoa(ports[1])
	procs := make([]*memberProc, 2)
	for i := range procs {
		procs[i] = startMemberProc(t, bin, append([]string{"--dir", dir, "--provider-port", strconv.Itoa(ports[i]),
			"--peers", peers, "--refresh", "100ms"}, tlsArgs("member"+strconv.Itoa(i))...)...)
	}
	for _, p := range procs {
		up := p.waitEvent(t, "up", func(ev memberEvent) bool { return ev.Event == "up" })
		if len(up.Members) != 2 {
			p.waitEvent(t, "two members", func(ev memberEvent) bool { return len(ev.Members) == 2 })
		}
	}

	out, err := exec.Command(bin, append(append([]string{"run", "--peers", peers, "--json"}, tlsArgs("client")...), "hello")...).Output()
	require.NoError(t, err, "dsh run --peers over TLS: %s", out)
	var res runResult
	require.NoError(t, json.Unmarshal(out, &res), "%s", out)
	require.Equal(t, "completed", res.End)
	require.NotEmpty(t, res.Text)

	// The health endpoint is HTTPS, and refuses a self-signed
	// certificate, three times, reported once.
	health := "127.0.0.1:" + strconv.Itoa(ports[0])
	if res, err := http.Get("http://" + health + "/_health"); err == nil {
		require.NotEqual(t, http.StatusOK, res.StatusCode)
		require.NoError(t, res.Body.Close())
	}
	intruder := &tls.Config{Certificates: []tls.Certificate{testutil.Issue(t, nil, "intruder")}, InsecureSkipVerify: true}
	for range 3 {
		c, err := tls.Dial("tcp", health, intruder)
		if err == nil {
			_, err = c.Read(make([]byte, 1))
			_ = c.Close()
		}
		require.Error(t, err)
	}

	// --insecure says so, first thing on stderr.
	insecure := startMemberProc(t, bin, "--dir", t.TempDir(), "--provider-port", strconv.Itoa(freePort(t)), "--insecure")
	select {
	case line := <-insecure.stderr:
		require.Equal(t, "dsh member: --insecure: no TLS on 127.0.0.1: anyone who reaches it can create sessions and read every session's messages", line)
	case <-time.After(60 * time.Second):
		t.Fatal("no warning from --insecure")
	}

	// SIGTERM: each member leaves and exits 0; member 0 reported the
	// intruder once, and nothing else went to stderr but the membership
	// records (info, the default level of dsh member): each saw the
	// other join.
	membership := regexp.MustCompile(`^time=\S+ level=INFO msg="cluster member (joined|left)" member=(127\.0\.0\.1:\d+) self=(127\.0\.0\.1:\d+)$`)
	for i, p := range procs {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		p.waitEvent(t, "left", func(ev memberEvent) bool { return ev.Event == "left" })
		require.NoError(t, p.cmd.Wait())
		var lines []string
		sawOtherJoin := false
		for line := range p.stderr {
			if m := membership.FindStringSubmatch(line); m != nil {
				sawOtherJoin = sawOtherJoin || (m[1] == "joined" && m[2] != m[3])
				continue
			}
			lines = append(lines, line)
		}
		require.True(t, sawOtherJoin, "member %d logged the other's joining", i)
		if i == 0 {
			require.Len(t, lines, 1, "%q", lines)
			require.Regexp(t, `^dsh member: cluster: refused 127\.0\.0\.1:\d+ \(certificate "CN=intruder" issued by "CN=intruder"\): x509: certificate signed by unknown authority$`, lines[0])
		} else {
			require.Empty(t, lines)
		}
	}
}
