package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// chromiumPath is Debian's chromium, which .ci/run installs. Nothing is
// ever downloaded: a machine without it fails the test, saying so.
const chromiumPath = "/usr/bin/chromium"

// TestServePageInABrowser drives the web page of a real dsh serve (with a
// token) in a real (headless) chromium: give the token once, create a
// session, send a prompt, watch the answer stream in (fetch, with the
// token in its header) and the turn end, reload and find the transcript
// again without being asked again. It leaves a screenshot in its temp
// dir.
func TestServePageInABrowser(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("this test needs Debian's chromium at %s (apt-get install chromium; .ci/run installs it): %v", chromiumPath, err)
	}
	tokFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokFile, []byte("browser-token"), 0o600))
	ctx, cancelServe := context.WithCancel(context.Background())
	defer cancelServe()
	urls := make(chan string, 1)
	done := make(chan error, 1)
	var stderr bytes.Buffer
	go func() {
		done <- runServe(ctx, []string{"--addr", "127.0.0.1:0", "--dir", t.TempDir(), "--synthetic-speed", "200", "--token-file", tokFile},
			&bytes.Buffer{}, &stderr, serveEnv{listening: func(u string) { urls <- u }})
	}()
	var url string
	select {
	case url = <-urls:
	case err := <-done:
		t.Fatalf("serve ended early: %v", err)
	}

	bctx, cancelAlloc, cancelBrowser := startChromium(t)
	defer cancelAlloc()
	defer cancelBrowser()
	bctx, cancelTimeout := context.WithTimeout(bctx, 2*time.Minute)
	defer cancelTimeout()

	text := func(sel chromedp.CSS) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Text(sel))
		require.NoError(t, err, "text of %s", sel)
		return v
	}
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(url+"/"),
		// The page asks for the token once (the list answered 401).
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), "browser-token"),
		chromedp.Click(chromedp.ID("login-ok")),
		chromedp.WaitNotVisible(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("new")),
		chromedp.Click(chromedp.ID("new")),
		chromedp.WaitVisible(chromedp.ID("text")),
		chromedp.SendKeys(chromedp.ID("text"), "Hello from the browser"),
		chromedp.Click(chromedp.ID("send")),
		chromedp.WaitVisible(chromedp.CSS(`#transcript .turn-end[data-kind="completed"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#sessions li.current`)),
	))
	sid := text("#sid")
	answer := text("#transcript .assistant .text")
	require.NotEmpty(t, sid)
	require.NotEmpty(t, strings.TrimSpace(answer), "the streamed answer is in the page")
	require.Equal(t, "turn 1 ended: completed", text("#transcript .turn-end"))

	// A reload streams the log again: the same transcript.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`#transcript .turn-end`)),
		chromedp.WaitVisible(chromedp.CSS(`#sessions li.current`)),
	))
	require.Equal(t, sid, text("#sid"))
	require.Equal(t, "Hello from the browser", text("#transcript .user"))
	require.Equal(t, answer, text("#transcript .assistant .text"))
	require.Equal(t, "Hello from the browser", text("#sessions li.current .t"))
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "serve-page.png")
	require.NoError(t, os.WriteFile(path, shot, 0o600))
	t.Logf("screenshot: %s", path)

	cancelBrowser()
	cancelAlloc()
	cancelServe()
	require.NoError(t, <-done, "stderr: %s", stderr.String())
}

// startChromium starts a headless chromium and returns its chromedp
// context. Chromium now and then exits before it listens (it printed
// only its crash reporter's complaints, "chrome failed to start", seen
// once in CI with nothing else running): that start, and only that, is
// tried again, up to three times. Everything the test asserts of the page
// runs on a browser that did start.
func startChromium(t *testing.T) (context.Context, context.CancelFunc, context.CancelFunc) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromiumPath), chromedp.NoSandbox,
			chromedp.DisableGPU, chromedp.WindowSize(1200, 800), chromedp.UserDataDir(t.TempDir()))
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, cancelBrowser := chromedp.NewContext(actx)
		err := chromedp.Do(bctx) // no action: starts the browser
		if err == nil {
			return bctx, cancelAlloc, cancelBrowser
		}
		cancelBrowser()
		cancelAlloc()
		if attempt == 3 || !strings.Contains(err.Error(), "chrome failed to start") {
			t.Fatalf("starting chromium (attempt %d): %v", attempt, err)
		}
		t.Logf("chromium exited before it listened (attempt %d), starting it again: %v", attempt, err)
	}
}
