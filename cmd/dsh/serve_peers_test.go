package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestServePeersEndToEnd: dsh serve --peers puts a two-member cluster's
// sessions on HTTP: create, send with wait, the event stream, the
// messages, the listing (read from the shared store), then a clean exit.
func TestServePeersEndToEnd(t *testing.T) {
	bin := buildDsh(t)
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

	srv := startServe(t, bin, "--addr", "127.0.0.1:0", "--peers", peers, "--dir", dir)
	url := srv.url
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

	srv.stop(t)
	http.DefaultClient.CloseIdleConnections()
}
