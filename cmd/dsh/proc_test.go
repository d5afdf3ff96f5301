package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The process tests run the real dsh binary, built once per test process.
var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
	out  []byte
}

// buildDsh returns the dsh binary, built on first use into a directory
// that TestMain removes when the tests end.
func buildDsh(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "dsh-test-bin-")
		if built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "dsh")
		built.out, built.err = exec.Command("go", "build", "-o", built.bin, ".").CombinedOutput()
	})
	require.NoError(t, built.err, "go build: %s", built.out)
	return built.bin
}

// removeBuilt removes the binary buildDsh built, if any.
func removeBuilt() {
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
}

// serveProc is a running `dsh serve`.
type serveProc struct {
	cmd    *exec.Cmd
	url    string // the base URL it printed as it started listening
	stderr *lockedBuffer
	exited bool
}

// startServe starts `dsh serve` with args (and the synthetic model, no
// token from the environment), waits until it says where it listens, and
// kills it at cleanup unless the test waited for it to exit.
func startServe(t *testing.T, bin string, args ...string) *serveProc {
	t.Helper()
	p := &serveProc{cmd: exec.Command(bin, append([]string{"serve"}, args...)...), stderr: &lockedBuffer{}}
	p.cmd.Env = append(os.Environ(), "DEEPSEEK_API_KEY=", "DSH_TOKEN=")
	p.cmd.Stderr = p.stderr
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() {
		if !p.exited {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for p.url == "" {
		require.True(t, time.Now().Before(deadline), "dsh serve never listened: %s", p.stderr.String())
		if _, rest, ok := strings.Cut(p.stderr.String(), "listening on "); ok {
			p.url, _, _ = strings.Cut(rest, " ")
		} else {
			<-time.After(5 * time.Millisecond) // the poll interval
		}
	}
	return p
}

// stop sends SIGTERM and requires a clean exit.
func (p *serveProc) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	p.wait(t)
}

// wait requires the process to exit cleanly.
func (p *serveProc) wait(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Wait(), "stderr: %s", p.stderr.String())
	p.exited = true
}

// serveInProcess runs dsh serve's runServe in this process with args and
// env (its listening hook is set here), waits until it listens, and
// returns its base URL and a stop that cancels it and requires a clean
// exit within a minute.
func serveInProcess(t *testing.T, env serveEnv, args ...string) (url string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	urls := make(chan string, 1)
	stderr := &lockedBuffer{}
	done := make(chan error, 1)
	env.listening = func(u string) { urls <- u }
	go func() { done <- runServe(ctx, args, &bytes.Buffer{}, stderr, env) }()
	select {
	case url = <-urls:
	case err := <-done:
		t.Fatalf("serve ended early: %v: %s", err, stderr.String())
	}
	return url, func() {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err, "stderr: %s", stderr.String())
		case <-time.After(time.Minute):
			t.Fatal("serve did not stop")
		}
	}
}
