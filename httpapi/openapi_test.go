package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/supervisor"
)

var (
	specOnce   sync.Once
	specRouter routers.Router
	specErr    error
)

// openAPIRouter loads the served document once, validating it.
func openAPIRouter() (routers.Router, error) {
	specOnce.Do(func() {
		doc, err := openapi3.NewLoader().LoadFromData(openAPI)
		if err != nil {
			specErr = err
			return
		}
		if err := doc.Validate(context.Background()); err != nil {
			specErr = err
			return
		}
		// The router matches paths only: any host serves them.
		doc.Servers = nil
		specRouter, specErr = legacy.NewRouter(doc)
	})
	return specRouter, specErr
}

// validating checks every response of a route the document describes
// against it (status, content type, body schema), and records a failure
// on t. An event stream's body is not read.
type validating struct {
	t    *testing.T
	next http.RoundTripper
	mu   sync.Mutex
	n    int // responses validated
}

func (v *validating) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := v.next.RoundTrip(req)
	if err != nil {
		return res, err
	}
	router, rerr := openAPIRouter()
	if rerr != nil {
		v.t.Errorf("openapi.json: %v", rerr)
		return res, nil
	}
	route, params, ferr := router.FindRoute(req)
	if ferr != nil {
		if res.StatusCode != http.StatusNotFound && res.StatusCode != http.StatusForbidden && res.StatusCode != http.StatusNoContent {
			v.t.Errorf("%s %s answered %d but is not in openapi.json: %v", req.Method, req.URL.Path, res.StatusCode, ferr)
		}
		return res, nil
	}
	stream := strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream")
	var body []byte
	if !stream {
		body, err = io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return nil, err
		}
		res.Body = io.NopCloser(bytes.NewReader(body))
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}},
		Status:  res.StatusCode,
		Header:  res.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, ExcludeResponseBody: stream},
	}
	in.SetBodyBytes(body)
	if verr := openapi3filter.ValidateResponse(req.Context(), in); verr != nil {
		v.t.Errorf("%s %s → %d %s: not as openapi.json says: %v", req.Method, req.URL.Path, res.StatusCode, body, verr)
	}
	v.mu.Lock()
	v.n++
	v.mu.Unlock()
	return res, nil
}

// TestOpenAPIDocument: the served document is valid OpenAPI 3.1 and
// names every route the server has.
func TestOpenAPIDocument(t *testing.T) {
	f := start(t, supervisor.Config{}, Config{Token: "t"})
	f.token = ""
	var doc map[string]any
	f.must(t, http.StatusOK, "GET", "/openapi.json", nil, &doc)
	require.Equal(t, "3.1.0", doc["openapi"])
	_, err := openAPIRouter()
	require.NoError(t, err)
	paths := doc["paths"].(map[string]any)
	for _, r := range [][2]string{
		{"post", "/v1/sessions"}, {"get", "/v1/sessions"}, {"get", "/v1/sessions/{id}"},
		{"post", "/v1/sessions/{id}/messages"}, {"get", "/v1/sessions/{id}/messages"},
		{"post", "/v1/sessions/{id}/cancel"}, {"post", "/v1/sessions/{id}/fork"},
		{"get", "/v1/sessions/{id}/events"}, {"get", "/healthz"}, {"get", "/openapi.json"},
	} {
		p, ok := paths[r[1]].(map[string]any)
		require.True(t, ok, "%s is missing", r[1])
		require.Contains(t, p, r[0], "%s %s is missing", r[0], r[1])
	}
	// Every code the server answers with is in the document's enum.
	var codes []string
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	enum := schemas["Error"].(map[string]any)["properties"].(map[string]any)["error"].(map[string]any)["properties"].(map[string]any)["code"].(map[string]any)["enum"]
	b, err := json.Marshal(enum)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &codes))
	for c := range statusOf {
		require.Contains(t, codes, string(c))
	}
	require.Len(t, codes, len(statusOf))
}

// TestValidatorRefusesAStrayResponse: the validation the fixtures'
// client runs refuses a body the document does not describe (so it
// checks something).
func TestValidatorRefusesAStrayResponse(t *testing.T) {
	router, err := openAPIRouter()
	require.NoError(t, err)
	req, err := http.NewRequest("GET", "http://127.0.0.1/v1/sessions/x", nil)
	require.NoError(t, err)
	route, params, err := router.FindRoute(req)
	require.NoError(t, err)
	for _, body := range []string{`{"id":"x","status":"dreaming"}`, `{"error":{"code":"OOPS","message":"x"}}`} {
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
			Status:                 200, Header: http.Header{"Content-Type": {"application/json"}},
			Options: &openapi3filter.Options{IncludeResponseStatus: true},
		}
		if strings.Contains(body, "OOPS") {
			in.Status = 404
		}
		in.SetBodyBytes([]byte(body))
		require.Error(t, openapi3filter.ValidateResponse(context.Background(), in), body)
	}
}
