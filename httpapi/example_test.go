package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/dshgo/dsh/httpapi"
	"github.com/dshgo/dsh/supervisor"
)

// Example serves the sessions of an in-memory host over HTTP, without a
// token (so loopback only), and drives one session as a client would:
// create it, send a message and wait for the turn that takes it, then
// read the session as listed.
func Example() {
	ctx := context.Background()
	host, err := supervisor.Open(supervisor.Config{}) // memory only, the offline synthetic model
	if err != nil {
		panic(err)
	}
	defer host.Close(ctx)
	srv, err := httpapi.New(httpapi.Config{Backend: host, LoopbackOnly: true})
	if err != nil {
		panic(err)
	}
	ts := httptest.NewServer(srv) // or http.ListenAndServe(addr, srv)
	defer ts.Close()
	defer srv.Close() // ends the event streams first

	call := func(method, path, body string, out any) int {
		req, err := http.NewRequestWithContext(ctx, method, ts.URL+path, strings.NewReader(body))
		if err != nil {
			panic(err)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer res.Body.Close()
		if err := json.NewDecoder(res.Body).Decode(out); err != nil {
			panic(err)
		}
		return res.StatusCode
	}
	var created struct{ ID string }
	fmt.Println(call("POST", "/v1/sessions", `{"id":"demo"}`, &created), created.ID)
	var sent struct {
		Turn   int64
		Reason struct{ Kind string }
	}
	fmt.Println(call("POST", "/v1/sessions/demo/messages?wait=true", `{"text":"hello"}`, &sent), sent.Turn, sent.Reason.Kind)
	var got struct{ Status, Title string }
	fmt.Println(call("GET", "/v1/sessions/demo", "", &got), got.Status, got.Title)
	// Output:
	// 201 demo
	// 200 1 completed
	// 200 idle hello
}
