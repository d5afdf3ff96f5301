package session

import (
	"errors"
	"fmt"
	"path"
	"slices"

	"github.com/dshgo/dsh/messages"
)

// FormatVersion is SESSION_FORMAT_VERSION: the version of the log format
// dsh reads and writes. It is pinned at 0 while the reference is
// pre-release; there is no migration chain.
const FormatVersion = 0

// SessionID names a session. It doubles as the agent id.
type SessionID string

// Header is the session header: the first line of a log file
// (docs/session-log.md#creating-and-restoring-a-log,
// docs/log-format.md#jsonl-files). Optional fields are absent when zero ("" or
// an absent OptInt).
type Header struct {
	ID              SessionID
	CreatedAt       int64 // epoch ms, non-negative
	Cwd             string
	ParentSession   string
	SeedLength      messages.OptInt
	Origin          string // "" or "subagent"
	DelegationDepth int64
	AgentPreset     string
}

// FormatVersionError reports a log written in another format version. Its
// message says which way to go: a newer log needs a newer dsh; an older one
// has no upgrade path.
type FormatVersionError struct {
	Version int64
}

func (e *FormatVersionError) Error() string {
	if e.Version > FormatVersion {
		return fmt.Sprintf("session: log format version %d was written by a newer harness — upgrade dsh (this build reads version %d)", e.Version, FormatVersion)
	}
	return fmt.Sprintf("session: log format version %d is older than %d and has no upgrade path", e.Version, FormatVersion)
}

// ErrNotHeader reports a first line that is not a session header.
var ErrNotHeader = errors.New("session: not a session header")

// Validate checks the header rules of the reference.
func (h Header) Validate() error {
	switch {
	case h.ID == "":
		return fmt.Errorf("session: header needs an id")
	case h.CreatedAt < 0 || h.CreatedAt > maxSafe:
		return fmt.Errorf("session: header createdAt %d is not a non-negative safe integer", h.CreatedAt)
	case h.Cwd != "" && !path.IsAbs(h.Cwd) && !isWindowsAbs(h.Cwd):
		return fmt.Errorf("session: header cwd %q is not absolute", h.Cwd)
	case h.SeedLength.Or(0) < 0:
		return fmt.Errorf("session: header seedLength is negative")
	case h.DelegationDepth < 0:
		return fmt.Errorf("session: header delegationDepth is negative")
	case h.Origin != "" && h.Origin != "subagent":
		return fmt.Errorf("session: header origin %q is not \"subagent\"", h.Origin)
	}
	return nil
}

func isWindowsAbs(p string) bool {
	return len(p) >= 3 && p[1] == ':' && (p[2] == '\\' || p[2] == '/')
}

const maxSafe = 1<<53 - 1

// JSON returns the header line's JSON (without the newline).
func (h Header) JSON() messages.JSON {
	var o messages.ObjectBuilder
	o.String("type", "session").Int("version", FormatVersion).String("id", string(h.ID)).Int("createdAt", h.CreatedAt)
	if h.Cwd != "" {
		o.String("cwd", h.Cwd)
	}
	if h.ParentSession != "" {
		o.String("parentSession", h.ParentSession)
	}
	if v, ok := h.SeedLength.Get(); ok {
		o.Int("seedLength", v)
	}
	if h.Origin != "" {
		o.String("origin", h.Origin)
	}
	o.Int("delegationDepth", h.DelegationDepth)
	if h.AgentPreset != "" {
		o.String("agentPreset", h.AgentPreset)
	}
	return o.Build()
}

var headerKeys = []string{"agentPreset", "createdAt", "cwd", "delegationDepth", "id", "origin",
	"parentSession", "seedLength", "type", "version"}

// parseHeaderLine reads a header line. The version is checked before anything
// else, so a future format reports "upgrade" rather than "corrupt"; then
// the shape: type "session", the known keys only (sandboxMode and
// approvalPolicy were removed from the format and are refused),
// delegationDepth required.
func parseHeaderLine(line []byte) (Header, error) {
	j, err := messages.ParseJSON(line)
	if err != nil {
		return Header{}, fmt.Errorf("%w: %w", ErrNotHeader, err)
	}
	if j.Kind() != messages.KindObject {
		return Header{}, fmt.Errorf("%w: not a JSON object", ErrNotHeader)
	}
	if t, _ := j.Field("type"); t.String() != `"session"` {
		return Header{}, fmt.Errorf("%w: type is not \"session\"", ErrNotHeader)
	}
	vj, ok := j.Field("version")
	v, isInt := vj.AsInt()
	if !ok || !isInt {
		return Header{}, fmt.Errorf("%w: version is not an integer", ErrNotHeader)
	}
	if v != FormatVersion {
		return Header{}, &FormatVersionError{Version: v}
	}
	for k := range j.Members() {
		if _, known := slices.BinarySearch(headerKeys, k); !known {
			return Header{}, fmt.Errorf("%w: unknown header field %q", ErrNotHeader, k)
		}
	}
	d := dataReader{data: j, prefix: "session: header"}
	h := Header{ID: SessionID(d.str("id")), CreatedAt: d.int("createdAt"), DelegationDepth: d.int("delegationDepth")}
	opt := func(k string) string {
		if _, has := j.Field(k); has {
			return d.str(k)
		}
		return ""
	}
	h.Cwd, h.ParentSession, h.Origin, h.AgentPreset = opt("cwd"), opt("parentSession"), opt("origin"), opt("agentPreset")
	if _, has := j.Field("seedLength"); has {
		h.SeedLength = messages.Some(d.int("seedLength"))
	}
	if dd, _ := j.Field("delegationDepth"); dd.String() == "-0" {
		d.fail("delegationDepth is -0")
	}
	if d.err != nil {
		return Header{}, d.err
	}
	return h, h.Validate()
}

// AdapterDefaults marks the call-config fields the adapter materialised
// rather than the caller.
type AdapterDefaults struct {
	ReasoningEffort bool
	MaxTokens       bool
}

// EpochHeader is what every model request of an epoch shares: the call config,
// the adapter-default markers, the system prompt and the tools
// (docs/session-log.md#request-headers). It is immutable; tools are behind
// Tools().
type EpochHeader struct {
	Config          messages.CallConfig
	AdapterDefaults AdapterDefaults
	System          string
	tools           []messages.ToolSchema
	toolsJSON       []messages.JSON // each tool's JSON as written, for headerEquals
}

// CallerConfig is the header's config without the fields its adapter
// materialised (AdapterDefaults): what the caller asked for.
func (h EpochHeader) CallerConfig() messages.CallConfig {
	cfg := h.Config
	if h.AdapterDefaults.ReasoningEffort {
		cfg.ReasoningEffort = ""
	}
	if h.AdapterDefaults.MaxTokens {
		cfg.MaxTokens = messages.OptInt{}
	}
	return cfg
}

// NewEpochHeader returns a header; tools is copied.
func NewEpochHeader(cfg messages.CallConfig, defaults AdapterDefaults, system string, tools []messages.ToolSchema) EpochHeader {
	h := EpochHeader{Config: cfg, AdapterDefaults: defaults, System: system, tools: slices.Clone(tools)}
	for _, t := range h.tools {
		h.toolsJSON = append(h.toolsJSON, t.JSON())
	}
	return h
}

// Tools returns a copy of the tool schemas, owned by the caller.
func (h EpochHeader) Tools() []messages.ToolSchema { return slices.Clone(h.tools) }

// Canonical returns the canonical form: an absent and an empty system or
// tool list are the same, and adapter defaults exist only when marked.
// The fields already encode absence as emptiness, so this returns h with
// an empty tool list normalised to nil.
func (h EpochHeader) Canonical() EpochHeader {
	if len(h.tools) == 0 {
		h.tools, h.toolsJSON = nil, nil
	}
	return h
}

// Equal is the reference's headerEquals: config field by field, both
// markers, the system prompt, and the tools in order by their JSON text.
func (h EpochHeader) Equal(o EpochHeader) bool {
	return h.Config.Equal(o.Config) && h.AdapterDefaults == o.AdapterDefaults && h.System == o.System &&
		slices.EqualFunc(h.toolsJSON, o.toolsJSON, func(a, b messages.JSON) bool { return a.String() == b.String() })
}

// JSON returns the header in its canonical logged shape.
func (h EpochHeader) JSON() messages.JSON {
	var o messages.ObjectBuilder
	o.Raw("config", h.Config.JSON())
	if h.AdapterDefaults != (AdapterDefaults{}) {
		var d messages.ObjectBuilder
		if h.AdapterDefaults.ReasoningEffort {
			d.Bool("reasoningEffort", true)
		}
		if h.AdapterDefaults.MaxTokens {
			d.Bool("maxTokens", true)
		}
		o.Raw("adapterDefaults", d.Build())
	}
	if h.System != "" {
		o.String("system", h.System)
	}
	if len(h.toolsJSON) > 0 {
		o.Raw("tools", messages.ArrayOf(h.toolsJSON...))
	}
	return o.Build()
}

// parseEpochHeader reads a logged header and checks the seed-boundary shape
// rules of the reference (assertCurrentLlmShape): a config with provider
// and model, a reasoningEffort absent or non-empty, adapter-default markers
// that are only true, only for reasoningEffort and maxTokens, and only when
// that config field is present.
func parseEpochHeader(j messages.JSON) (EpochHeader, error) {
	if j.Kind() != messages.KindObject {
		return EpochHeader{}, fmt.Errorf("request/header header is not an object")
	}
	cj, _ := j.Field("config")
	cfg, err := messages.ParseCallConfig(cj)
	if err != nil {
		return EpochHeader{}, fmt.Errorf("request/header lacks provider/model: %w", err)
	}
	h := EpochHeader{Config: cfg}
	if dj, has := j.Field("adapterDefaults"); has {
		if dj.Kind() != messages.KindObject {
			return EpochHeader{}, fmt.Errorf("request/header adapterDefaults is not an object")
		}
		for k, v := range dj.Members() {
			if v.String() != "true" {
				return EpochHeader{}, fmt.Errorf("request/header adapterDefaults.%s must be true", k)
			}
			switch {
			case k == "reasoningEffort" && cfg.ReasoningEffort != "":
				h.AdapterDefaults.ReasoningEffort = true
			case k == "maxTokens" && cfg.MaxTokens != (messages.OptInt{}):
				h.AdapterDefaults.MaxTokens = true
			default:
				return EpochHeader{}, fmt.Errorf("request/header adapterDefaults.%s marks no present config field", k)
			}
		}
	}
	if sj, has := j.Field("system"); has {
		s, ok := sj.AsString()
		if !ok {
			return EpochHeader{}, fmt.Errorf("request/header system is not a string")
		}
		h.System = s
	}
	if tj, has := j.Field("tools"); has {
		if tj.Kind() != messages.KindArray {
			return EpochHeader{}, fmt.Errorf("request/header tools is not an array")
		}
		for e := range tj.Elements() {
			t, err := messages.ParseToolSchema(e)
			if err != nil {
				return EpochHeader{}, fmt.Errorf("request/header tools: %w", err)
			}
			h.tools = append(h.tools, t)
			h.toolsJSON = append(h.toolsJSON, e)
		}
	}
	return h.Canonical(), nil
}
