package deepseek

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/messages"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testKey is the API key of the test providers; no failure message, log
// line or formatted value may contain it.
const testKey = "sk-test-5ecret-key-do-not-leak-0123456789"

// testdataDir returns the module's testdata/llm, found by walking up from
// the test's working directory to go.mod.
func testdataDir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "testdata", "llm")
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.mod above the test's working directory")
		dir = parent
	}
}

func readTestdata(t testing.TB, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdataDir(t), rel))
	require.NoError(t, err)
	return b
}

// httprrRecord is one request/response pair of an httprr trace.
type httprrRecord struct {
	req      *http.Request
	reqBody  []byte
	resp     *http.Response
	respBody []byte
}

// readHTTPRR parses langchaingo's "httprr trace v1" format: a header
// line, then per record "<reqLen> <respLen>\n", the request dump and the
// response dump, which net/http reads unchanged.
func readHTTPRR(t testing.TB, rel string) []httprrRecord {
	t.Helper()
	data := readTestdata(t, rel)
	const header = "httprr trace v1\n"
	require.True(t, bytes.HasPrefix(data, []byte(header)), "%s: not an httprr trace", rel)
	data = data[len(header):]
	var out []httprrRecord
	for len(data) > 0 {
		nl := bytes.IndexByte(data, '\n')
		require.Positive(t, nl, "%s: record header", rel)
		var reqLen, respLen int
		_, err := fmt.Sscanf(string(data[:nl]), "%d %d", &reqLen, &respLen)
		require.NoError(t, err, "%s: record header %q", rel, data[:nl])
		data = data[nl+1:]
		require.GreaterOrEqual(t, len(data), reqLen+respLen, "%s: short record", rel)
		reqBytes, respBytes := data[:reqLen], data[reqLen:reqLen+respLen]
		data = data[reqLen+respLen:]

		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(reqBytes)))
		require.NoError(t, err)
		reqBody, err := io.ReadAll(req.Body)
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(respBytes)), req)
		require.NoError(t, err)
		respBody, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		out = append(out, httprrRecord{req: req, reqBody: reqBody, resp: resp, respBody: respBody})
	}
	return out
}

// chunksTxtBody turns a vercel/ai *.chunks.txt file (one JSON chunk per
// line) into the SSE body its harness serves: "data: <line>\n\n" per line,
// then "data: [DONE]\n\n".
func chunksTxtBody(t testing.TB, rel string) []byte {
	t.Helper()
	var b bytes.Buffer
	for line := range strings.SplitSeq(strings.TrimSpace(string(readTestdata(t, rel))), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			b.WriteString("data: " + line + "\n\n")
		}
	}
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// reply is what a test server answers.
type reply struct {
	status      int
	contentType string
	header      http.Header
	body        []byte
	// write, when set, replaces the default writer (the whole body at once).
	write func(w http.ResponseWriter, body []byte)
	// handler, when set, answers instead of all of the above.
	handler http.HandlerFunc
}

// captured is a request a test server received.
type captured struct {
	method, path string
	header       http.Header
	body         []byte
}

// server starts an httptest server answering every request with r and
// recording the requests; it is closed by the test's cleanup.
func server(t testing.TB, r reply) (*httptest.Server, func() []captured) {
	t.Helper()
	reqs := make(chan captured, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		select {
		case reqs <- captured{method: req.Method, path: req.URL.Path, header: req.Header.Clone(), body: body}:
		default:
		}
		if r.handler != nil {
			r.handler(w, req)
			return
		}
		for k, vs := range r.header {
			w.Header()[k] = vs
		}
		ct := r.contentType
		if ct == "" {
			ct = "text/event-stream; charset=utf-8"
		}
		w.Header().Set("Content-Type", ct)
		status := r.status
		if status == 0 {
			status = http.StatusOK
		}
		w.WriteHeader(status)
		if r.write != nil {
			r.write(w, r.body)
			return
		}
		_, _ = w.Write(r.body)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []captured {
		var out []captured
		for {
			select {
			case c := <-reqs:
				out = append(out, c)
			default:
				return out
			}
		}
	}
}

// newProvider returns a provider talking to srv with the test key.
func newProvider(t testing.TB, srv *httptest.Server, mod ...func(*Config)) *Provider {
	t.Helper()
	cfg := Config{BaseURL: srv.URL, APIKey: testKey, HTTPClient: srv.Client()}
	for _, m := range mod {
		m(&cfg)
	}
	p, err := New(cfg)
	require.NoError(t, err)
	return p
}

// userText returns a user message with one text block.
func userText(t testing.TB, text string) messages.Message {
	t.Helper()
	m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(text)}, messages.UserSource())
	require.NoError(t, err)
	return m
}

// simpleRequest asks one question of deepseek-chat.
func simpleRequest(t testing.TB, text string) llm.Request {
	t.Helper()
	return llm.NewRequest(messages.CallConfig{Provider: "deepseek", Model: "deepseek-chat"}, "", []messages.Message{userText(t, text)}, nil)
}

// result is a collected stream.
type result struct {
	chunks []messages.StreamChunk
	blocks map[int]messages.ContentBlock // from block-end chunks
	order  []int                         // block indexes in block-start order
	usage  *messages.TokenUsage
	finish *messages.FinishReason
	err    error
}

func (r result) failure(t testing.TB) messages.LlmFailure {
	t.Helper()
	require.Error(t, r.err, "stream did not fail")
	f, ok := llm.Failure(r.err)
	require.True(t, ok, "error %v is not an LlmFailure", r.err)
	require.NoError(t, f.Validate())
	return f
}

// blocksOf returns the assembled blocks of the given type, in index order.
func (r result) blocksOf(bt messages.BlockType) []messages.ContentBlock {
	var out []messages.ContentBlock
	for _, i := range r.order {
		if b, ok := r.blocks[i]; ok && b.Type() == bt {
			out = append(out, b)
		}
	}
	return out
}

func (r result) text(bt messages.BlockType) string {
	var s strings.Builder
	for _, b := range r.blocksOf(bt) {
		s.WriteString(b.Text())
	}
	return s.String()
}

// collect drains a stream and checks its grammar: the rules of
// docs/messages.md#stream-chunks, and
// this adapter's emission order (every block-end after every delta, then
// usage, then finish) and tool-call rules (one id per call, the name on
// the call's first delta, block-end agreeing with the deltas). It also
// checks the consumer contract: after an error nothing more is yielded.
func collect(t testing.TB, seq func(func(messages.StreamChunk, error) bool)) result {
	t.Helper()
	r := result{blocks: map[int]messages.ContentBlock{}}
	type openBlock struct {
		typ      messages.BlockType
		text     strings.Builder
		id, name string
		deltas   int
	}
	open := map[int]*openBlock{}
	phase := 0 // 0 deltas, 1 block-ends, 2 usage, 3 finished
	for c, err := range seq {
		require.Nil(t, r.err, "yielded after the error %v", r.err)
		if err != nil {
			r.err = err
			continue
		}
		require.Less(t, phase, 3, "chunk after finish: %s", c.JSON())
		r.chunks = append(r.chunks, c)
		require.GreaterOrEqual(t, c.Index(), 0)
		switch c.Type() {
		case messages.ChunkBlockStart:
			require.Equal(t, 0, phase, "block-start after block-ends began")
			_, seen := open[c.Index()]
			require.False(t, seen, "block %d started twice", c.Index())
			require.Equal(t, len(open), c.Index(), "blocks are numbered in first-seen order")
			open[c.Index()] = &openBlock{typ: c.BlockType()}
			r.order = append(r.order, c.Index())
		case messages.ChunkTextDelta, messages.ChunkReasoningDelta, messages.ChunkToolCallDelta:
			require.Equal(t, 0, phase, "delta after block-ends began: %s", c.JSON())
			b := open[c.Index()]
			require.NotNil(t, b, "delta for a block never started: %s", c.JSON())
			want := map[messages.ChunkType]messages.BlockType{
				messages.ChunkTextDelta: messages.BlockText, messages.ChunkReasoningDelta: messages.BlockReasoning,
				messages.ChunkToolCallDelta: messages.BlockToolCall}[c.Type()]
			require.Equal(t, want, b.typ, "delta type mismatch: %s", c.JSON())
			if c.Type() == messages.ChunkToolCallDelta {
				if b.deltas == 0 {
					b.id = c.CallID()
					name, ok := c.Name()
					require.True(t, ok, "first tool-call delta lacks the name: %s", c.JSON())
					b.name = name
				} else {
					require.Equal(t, b.id, c.CallID(), "call id changed")
				}
				b.text.WriteString(c.ArgumentsDelta())
			} else {
				require.NotEmpty(t, c.Text(), "empty delta: %s", c.JSON())
				b.text.WriteString(c.Text())
			}
			b.deltas++
		case messages.ChunkBlockEnd:
			require.LessOrEqual(t, phase, 1)
			phase = 1
			b := open[c.Index()]
			require.NotNil(t, b, "block-end for a block never started")
			_, ended := r.blocks[c.Index()]
			require.False(t, ended, "block %d ended twice", c.Index())
			blk := c.Block()
			require.Equal(t, b.typ, blk.Type())
			if blk.Type() == messages.BlockToolCall {
				require.Equal(t, b.id, blk.ID())
				require.Equal(t, b.name, blk.Name())
				require.Equal(t, b.text.String(), blk.Arguments())
			} else {
				require.Equal(t, b.text.String(), blk.Text())
			}
			r.blocks[c.Index()] = blk
		case messages.ChunkUsage:
			require.LessOrEqual(t, phase, 1, "second usage, or usage after finish")
			phase = 2
			u := c.Usage()
			r.usage = &u
		case messages.ChunkFinish:
			phase = 3
			fr := c.Reason()
			r.finish = &fr
		}
	}
	if r.err == nil {
		require.NotNil(t, r.finish, "stream ended without finish or error")
		require.Len(t, r.blocks, len(open), "a successful stream ends every block")
	} else {
		require.Nil(t, r.finish, "finish and error in one stream")
	}
	return r
}

// sseBody builds an SSE body from JSON payloads, ending in [DONE].
func sseBody(payloads ...string) []byte {
	var b bytes.Buffer
	for _, p := range payloads {
		b.WriteString("data: " + p + "\n\n")
	}
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// Chunk payload helpers for hand-made streams.
func deltaJSON(delta string) string {
	return `{"choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}],"usage":null}`
}

func finishJSON(reason, usage string) string {
	if usage == "" {
		usage = "null"
	}
	return `{"choices":[{"index":0,"delta":{"content":""},"finish_reason":"` + reason + `"}],"usage":` + usage + `}`
}

// streamOnce runs one call of p against req with a background context.
func streamOnce(t testing.TB, p *Provider, req llm.Request) result {
	t.Helper()
	return collect(t, p.Stream(context.Background(), req))
}
