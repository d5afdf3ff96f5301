package deepseek

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/dshgo/dsh/messages"
)

// Defaults of Config.
const (
	// DefaultBaseURL is DeepSeek's documented API endpoint. Any
	// OpenAI-compatible server works: set BaseURL to its root (for most
	// servers, including aimock, the root ends in /v1).
	DefaultBaseURL = "https://api.deepseek.com"
	// DefaultModel is used when a request's call config names no model.
	DefaultModel = "deepseek-chat"
	// DefaultIdleTimeout is the stream watchdog's default.
	DefaultIdleTimeout = 60 * time.Second
	// DefaultName is the provider id written into model sources.
	DefaultName = "deepseek"
	// APIKeyEnv is the environment variable read when Config.APIKey is
	// empty.
	APIKeyEnv = "DEEPSEEK_API_KEY"
)

// Config configures a Provider. Every field may be left at zero; each
// field's comment states its default. A Config holds a secret (APIKey):
// its String, GoString and LogValue methods redact it, so printing or
// logging a Config never shows the key.
type Config struct {
	// BaseURL is the API root; requests go to BaseURL + "/chat/completions".
	// Default DefaultBaseURL. Must be an absolute http or https URL.
	BaseURL string
	// APIKey is sent as "Authorization: Bearer <key>" and nowhere else.
	// Default: the value of the DEEPSEEK_API_KEY environment variable,
	// read once by New. When both are empty no Authorization header is
	// sent (local servers need none; a real endpoint answers 401 → AUTH).
	APIKey string
	// Model is the model used when a request's call config has none
	// (CallConfig normally always has one). Default DefaultModel.
	Model string
	// HTTPClient sends the requests. Default http.DefaultClient. Its
	// Timeout should be zero: it would cut long streams. The idle watchdog
	// and the caller's context bound a call instead.
	HTTPClient *http.Client
	// IdleTimeout is the stream watchdog: when no SSE data event (and,
	// before the response, no response headers) arrives for this long,
	// the call fails with TIMEOUT. SSE comments such as ": keep-alive" do
	// not re-arm it. Default DefaultIdleTimeout; negative is invalid.
	IdleTimeout time.Duration
	// Name is the provider id (Provider.Name). Default DefaultName.
	Name string
	// ImageURL turns an image block's opaque attachment reference into a
	// URL for an image_url content part (an https URL or a data: URL).
	// Default: the attachment's "url" member when it is a string; an image
	// without one is sent as a short text placeholder. An error fails the
	// call with INVALID_REQUEST. It must be safe for concurrent use.
	ImageURL func(attachment messages.JSON) (string, error)
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.BaseURL == "" {
		c.BaseURL = DefaultBaseURL
	}
	if c.APIKey == "" {
		c.APIKey = os.Getenv(APIKeyEnv)
	}
	if c.Model == "" {
		c.Model = DefaultModel
	}
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.Name == "" {
		c.Name = DefaultName
	}
	return c
}

// Validate checks the config; zero fields stand for their defaults. Its
// errors never contain the API key.
func (c Config) Validate() error {
	c = c.withDefaults()
	u, err := url.Parse(c.BaseURL)
	if err != nil {
		// url.Parse's error quotes the URL; a BaseURL is not a secret, but
		// userinfo in it could be, so the quote is dropped.
		return errors.New("deepseek: BaseURL is not a valid URL")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("deepseek: BaseURL must be an absolute http or https URL, got scheme %q", u.Scheme)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return errors.New("deepseek: BaseURL may not have a query or fragment")
	}
	if strings.ContainsAny(c.APIKey, "\r\n") {
		return errors.New("deepseek: APIKey contains a line break")
	}
	if c.IdleTimeout < 0 {
		return fmt.Errorf("deepseek: IdleTimeout %v is negative", c.IdleTimeout)
	}
	if strings.TrimSpace(c.Name) != c.Name {
		return fmt.Errorf("deepseek: Name %q has surrounding spaces", c.Name)
	}
	return nil
}

// String describes the config with the API key redacted.
func (c Config) String() string {
	key := "unset"
	if c.APIKey != "" {
		key = "[redacted]"
	}
	return fmt.Sprintf("deepseek.Config{Name:%q BaseURL:%q Model:%q APIKey:%s IdleTimeout:%v}",
		c.Name, c.BaseURL, c.Model, key, c.IdleTimeout)
}

// GoString is String, so that %#v redacts the key too.
func (c Config) GoString() string { return c.String() }

// LogValue implements slog.LogValuer with the API key redacted.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("name", c.Name),
		slog.String("baseURL", c.BaseURL),
		slog.String("model", c.Model),
		slog.Bool("apiKeySet", c.APIKey != ""),
		slog.Duration("idleTimeout", c.IdleTimeout),
	)
}
