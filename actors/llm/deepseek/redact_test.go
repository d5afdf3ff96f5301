package deepseek

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

// requireNoKey fails when s holds the test key, as sent or as a finish
// reason is turned into a failure code (upper-cased, punctuation to _).
func requireNoKey(t *testing.T, s, what string) {
	t.Helper()
	require.NotContains(t, s, testKey, "%s leaks the key: %s", what, s)
	require.NotContains(t, s, finishCode(testKey), "%s leaks the key as a code: %s", what, s)
}

// A server that echoes the key in its response headers: the failure's
// request id must not carry it.
func TestKeyNeverInRequestIDs(t *testing.T) {
	for _, name := range []string{"X-Request-Id", "X-Ds-Trace-Id"} {
		for _, status := range []int{http.StatusBadRequest, http.StatusTooManyRequests, http.StatusInternalServerError} {
			srv, _ := server(t, reply{status: status, contentType: "application/json",
				header: http.Header{name: {testKey}}, body: []byte(`{"error":{"message":"nope"}}`)})
			f := streamOnce(t, newProvider(t, srv), simpleRequest(t, "hi")).failure(t)
			require.Equal(t, "[redacted]", f.RequestID, "%s on %d", name, status)
			requireNoKey(t, f.JSON().String(), "the failure")
		}
	}
}

// A server that echoes the key in every streamed field: nothing the
// stream yields carries it.
func TestKeyNeverInStreamedFields(t *testing.T) {
	echo := "key=" + testKey
	srv, _ := server(t, reply{body: sseBody(
		deltaJSON(`{"reasoning_content":"`+echo+`"}`),
		deltaJSON(`{"content":"`+echo+`"}`),
		deltaJSON(`{"tool_calls":[{"index":0,"id":"`+testKey+`","type":"function","function":{"name":"`+testKey+`","arguments":"{\"k\":\"`+testKey+`\"}"}}]}`),
		finishJSON("tool_calls", ""),
	)})
	r := streamOnce(t, newProvider(t, srv), simpleRequest(t, "hi"))
	require.NoError(t, r.err)
	require.NotEmpty(t, r.chunks)
	for _, c := range r.chunks {
		requireNoKey(t, c.JSON().String(), "a chunk")
	}
	require.Equal(t, "key=[redacted]", r.text(messages.BlockText))
	require.Equal(t, "key=[redacted]", r.text(messages.BlockReasoning))
	calls := r.blocksOf(messages.BlockToolCall)
	require.Len(t, calls, 1)
	require.Equal(t, "[redacted]", calls[0].ID())
	require.Equal(t, `{"k":"[redacted]"}`, calls[0].Arguments())
}

// A finish reason that is the key: the failure code made from it does
// not spell it out.
func TestKeyNeverInFinishReasonCodes(t *testing.T) {
	srv, _ := server(t, reply{body: sseBody(deltaJSON(`{"content":"x"}`), finishJSON(testKey, ""))})
	f := streamOnce(t, newProvider(t, srv), simpleRequest(t, "hi")).failure(t)
	require.NotEmpty(t, f.Code)
	requireNoKey(t, f.JSON().String(), "the failure")
	requireNoKey(t, f.Code, "the code")
}
