package deepseek

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/messages"
)

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// maxMessageText bounds the provider text quoted in a failure message.
const maxMessageText = 1000

// The provider-text classifiers, the counterparts of the reference's
// isContextWindowExceededError and isQuotaExceededError. They are matched
// against the error's message, type and code together.
var (
	contextWindowRe = regexp.MustCompile(`(?i)context[ _-]?(length|window)|maximum context|` +
		`too many tokens|prompt is too long|input is too long|reduce the length of the (messages|prompt|input)|` +
		`exceeds? (the )?(model'?s? )?(maximum|max)[ _-]?(context|tokens|input)`)
	quotaRe = regexp.MustCompile(`(?i)insufficient[ _-]?(balance|quota|credits?|funds)|` +
		`exceeded your current quota|quota[ _-]?(exceeded|exhausted)|out of credits|` +
		`credit balance is too low|payment required|billing`)
	rateLimitRe = regexp.MustCompile(`(?i)rate[ _-]?limit|too many requests`)
	authRe      = regexp.MustCompile(`(?i)authentication|invalid[ _-]?api[ _-]?key|unauthori[sz]ed|permission[ _-]denied`)
)

// failure builds an LlmFailure whose message carries the provider's name
// and never the API key.
func (p *Provider) failure(code string, status int, format string, args ...any) messages.LlmFailure {
	msg := p.redact(p.cfg.Name + ": " + fmt.Sprintf(format, args...))
	return messages.LlmFailure{Message: msg, Code: code, Status: status}
}

// redact removes the API key from text that may quote it: a server that
// echoes the Authorization header in an error or a response header, a
// proxy's diagnostics, a hostile endpoint. The key is only ever put into
// the request header, so this is the second line of defence, not the
// first. Every string the provider takes from a response and hands on
// (failure messages and request ids, streamed text, reasoning, tool-call
// ids, names and arguments, finish reasons) passes through it, since all
// of it ends up in the session's log and on the user's terminal.
//
// What it cannot catch: a key split across two streamed deltas leaves a
// piece in each delta chunk (the block-end, which carries the assembled
// block the log's messages are built from, is redacted whole).
// Rejected: holding back the tail of every delta until the next one, which
// would delay every token for a threat that only a hostile endpoint poses.
func (p *Provider) redact(s string) string {
	if p.cfg.APIKey == "" {
		return s
	}
	return strings.ReplaceAll(s, p.cfg.APIKey, "[redacted]")
}

// redactFailure redacts every provider-derived string of f: the one place
// each failure passes before it leaves Stream, whichever path built it.
func (p *Provider) redactFailure(f messages.LlmFailure) messages.LlmFailure {
	f.Message = p.redact(f.Message)
	f.RequestID = p.redact(f.RequestID)
	f.Code = p.redact(f.Code)
	return f
}

// httpFailure maps a non-2xx response (docs/architecture.md#models).
func (p *Provider) httpFailure(resp *http.Response, body []byte) messages.LlmFailure {
	status := resp.StatusCode
	text, detail := errorText(body)
	if text == "" {
		text = http.StatusText(status)
		if text == "" {
			text = "no error message"
		}
	}
	f := p.failure(classifyHTTP(status, text+" "+detail), status, "HTTP %d: %s%s", status, text, detail)
	if status < 100 || status > 599 {
		f.Status = 0 // LlmFailure allows only 100..599
	}
	f.ProviderRetryAfterMs = retryAfterMs(resp.Header, p.now())
	f.RequestID = p.redact(requestID(resp.Header))
	return f
}

// classifyHTTP is the status mapping of
// docs/architecture.md#models. Provider text is consulted
// for the two classes the status alone cannot tell: a 400 that is a
// context-window overflow, and a quota or balance problem, which OpenAI
// sends as 429 insufficient_quota and DeepSeek as 402. A quota error is
// not retryable while a rate limit is, so the text wins over the 429.
func classifyHTTP(status int, text string) string {
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return llm.CodeAuth
	case status == http.StatusPaymentRequired:
		return llm.CodeQuota
	case status < 500 && quotaRe.MatchString(text):
		return llm.CodeQuota
	case status == http.StatusBadRequest && contextWindowRe.MatchString(text):
		return llm.CodeContextWindowExceeded
	case status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge:
		return llm.CodeInvalidRequest
	case status == http.StatusTooManyRequests:
		return llm.CodeRateLimit
	case status >= 500:
		return llm.CodeServer
	}
	return "HTTP_" + strconv.Itoa(status)
}

// streamErrorFailure maps an error object that arrived as an SSE data
// payload. A numeric code (OpenRouter sends the HTTP status there) is
// mapped like a status; otherwise the text decides, and an unclassified
// mid-stream error counts as SERVER: the request was accepted, so the
// failure is the server's.
func (p *Provider) streamErrorFailure(raw []byte) messages.LlmFailure {
	text, detail := errorText(raw)
	if text == "" {
		text = "error event without a message"
	}
	all := text + " " + detail
	status := 0
	if e, ok := parseErrorObject(raw); ok {
		if n, err := strconv.Atoi(strings.Trim(string(e.Code), `"`)); err == nil && n >= 100 && n <= 599 {
			status = n
		}
	}
	var code string
	switch {
	case status != 0:
		code = classifyHTTP(status, all)
	case contextWindowRe.MatchString(all):
		code = llm.CodeContextWindowExceeded
	case quotaRe.MatchString(all):
		code = llm.CodeQuota
	case rateLimitRe.MatchString(all):
		code = llm.CodeRateLimit
	case authRe.MatchString(all):
		code = llm.CodeAuth
	case strings.Contains(all, "invalid_request"):
		code = llm.CodeInvalidRequest
	default:
		code = llm.CodeServer
	}
	return p.failure(code, status, "error in stream: %s%s", text, detail)
}

// parseErrorObject reads {"error": {...}} or a bare {...} error object.
func parseErrorObject(raw []byte) (wireError, bool) {
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(raw, &env) == nil && len(env.Error) > 0 && env.Error[0] == '{' {
		raw = env.Error
	}
	var e wireError
	if json.Unmarshal(raw, &e) != nil {
		return wireError{}, false
	}
	return e, e.Message != "" || e.Type != "" || len(e.Code) > 0
}

// errorText extracts the provider's message from an error body, and a
// detail suffix naming its type and code. A body that is not a JSON error
// (an HTML page from a proxy, plain text) is quoted, trimmed and cut.
func errorText(body []byte) (text, detail string) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return "", ""
	}
	if e, ok := parseErrorObject(body); ok {
		var parts []string
		if e.Type != "" {
			parts = append(parts, "type "+e.Type)
		}
		if c := strings.Trim(string(e.Code), `"`); c != "" && c != "null" {
			parts = append(parts, "code "+c)
		}
		if len(parts) > 0 {
			detail = " (" + strings.Join(parts, ", ") + ")"
		}
		return cut(e.Message), detail
	}
	var s string // {"error":"text"}
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &env) == nil && json.Unmarshal(env.Error, &s) == nil {
		return cut(s), ""
	}
	return cut(string(body)), ""
}

// cut shortens provider text to maxMessageText bytes on a rune boundary.
func cut(s string) string {
	s = strings.TrimSpace(s)
	if len(s) <= maxMessageText {
		return s
	}
	i := maxMessageText
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// retryAfterMs reads the provider's retry hint: OpenAI's retry-after-ms,
// else Retry-After as delay-seconds or an HTTP date. 0 means none (a hint
// of 0 or a date in the past says nothing a retry policy can use).
func retryAfterMs(h http.Header, now time.Time) int64 {
	const maxMs = 24 * 60 * 60 * 1000 // a day: anything longer is not a retry hint
	clamp := func(ms float64) int64 {
		if math.IsNaN(ms) || ms <= 0 {
			return 0
		}
		return int64(math.Ceil(math.Min(ms, maxMs)))
	}
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil {
			if n := clamp(ms); n > 0 {
				return n
			}
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		return clamp(secs * 1000)
	}
	if t, err := http.ParseTime(v); err == nil {
		return clamp(float64(t.Sub(now)) / float64(time.Millisecond))
	}
	return 0
}

// requestID returns the provider's diagnostic request id: X-Request-Id
// (OpenAI, aimock) or DeepSeek's X-Ds-Trace-Id.
func requestID(h http.Header) string {
	if v := h.Get("X-Request-Id"); v != "" {
		return v
	}
	return h.Get("X-Ds-Trace-Id")
}
