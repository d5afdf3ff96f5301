package main

import (
	"bufio"
	"encoding/json"
	"io"
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

// TestServePeersEndToEnd: dsh serve --peers puts a two-member cluster's
// sessions on HTTP: create, send with wait, the event stream, the
// messages, the listing (read from the shared store), then a clean exit.
func TestServePeersEndToEnd(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "dsh")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	dir := t.TempDir()
	ports := []int{freePort(t), freePort(t)}
	peers := "127.0.0.1:" + strconv.Itoa(ports[0]) + ",127.0.0.1:" + strconv.Itoa(ports[1])
	var members []*memberProc
	for _, port := range ports {
		members = append(members, startMemberProc(t, bin, "--dir", dir, "--provider-port", strconv.Itoa(port), "--peers", peers, "--refresh", "100ms"))
	}
	for _, m := range members {
		m.waitEvent(t, "two members", func(ev memberEvent) bool { return len(ev.Members) == 2 })
	}

	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--peers", peers, "--dir", dir)
	cmd.Env = append(os.Environ(), "DEEPSEEK_API_KEY=", "DSH_TOKEN=")
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := false
	t.Cleanup(func() {
		if !exited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	url := ""
	deadline := time.Now().Add(60 * time.Second)
	for url == "" {
		require.True(t, time.Now().Before(deadline), "dsh serve --peers never listened: %s", stderr.String())
		if _, rest, ok := strings.Cut(stderr.String(), "listening on "); ok {
			url, _, _ = strings.Cut(rest, " ")
		} else {
			<-time.After(5 * time.Millisecond) // the poll interval
		}
	}
	call := func(method, path, body string, want int, out any) {
		t.Helper()
		req, err := http.NewRequest(method, url+path, strings.NewReader(body))
		require.NoError(t, err)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		require.Equal(t, want, res.StatusCode, "%s %s: %s", method, path, b)
		if out != nil {
			require.NoError(t, json.Unmarshal(b, out), "%s", b)
		}
	}
	var created struct{ ID string }
	call("POST", "/v1/sessions", `{"id":"on-the-cluster"}`, http.StatusCreated, &created)
	require.Equal(t, "on-the-cluster", created.ID)
	var sent struct {
		ID     string
		Turn   int64
		Reason struct{ Kind string }
	}
	call("POST", "/v1/sessions/on-the-cluster/messages?wait=true", `{"text":"hello cluster","id":"c1"}`, http.StatusOK, &sent)
	require.EqualValues(t, 1, sent.Turn)
	require.Equal(t, "completed", sent.Reason.Kind)
	// A retry is delivered once.
	var again struct{ ID string }
	call("POST", "/v1/sessions/on-the-cluster/messages", `{"text":"hello cluster","id":"c1"}`, http.StatusAccepted, &again)
	require.Equal(t, sent.ID, again.ID)

	var ms struct{ Messages []map[string]any }
	call("GET", "/v1/sessions/on-the-cluster/messages", "", http.StatusOK, &ms)
	require.Len(t, ms.Messages, 2)

	res, err := http.Get(url + "/v1/sessions/on-the-cluster/events")
	require.NoError(t, err)
	r := bufio.NewReader(res.Body)
	var types []string
	for len(types) == 0 || types[len(types)-1] != "turn/end" {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		if typ, ok := strings.CutPrefix(line, "event: "); ok {
			types = append(types, strings.TrimSpace(typ))
		}
	}
	require.Contains(t, types, "assistant/chunk")
	res.Body.Close()

	var list struct {
		Sessions []struct {
			ID, Title string
			Turns     int64
		}
	}
	call("GET", "/v1/sessions", "", http.StatusOK, &list)
	require.Len(t, list.Sessions, 1)
	require.Equal(t, "on-the-cluster", list.Sessions[0].ID)
	require.Equal(t, "hello cluster", list.Sessions[0].Title)
	require.EqualValues(t, 1, list.Sessions[0].Turns)
	call("GET", "/v1/sessions/nobody", "", http.StatusNotFound, nil)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), "stderr: %s", stderr.String())
	exited = true
	http.DefaultClient.CloseIdleConnections()
}
