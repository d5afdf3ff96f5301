package messages

import "fmt"

// SourceKind names where a message came from.
type SourceKind string

// The source kinds dsh produces (docs/messages.md#message-sources). Logs
// written by the reference carry other kinds too (agent-instructions,
// skill-catalog, ...); those are read and kept verbatim, never refused.
const (
	SourceUser   SourceKind = "user"
	SourcePlugin SourceKind = "plugin"
	SourceModel  SourceKind = "model"
	SourceTool   SourceKind = "tool"
)

// Source is the immutable provenance of a message: a kind plus the fields of
// that kind. It keeps its canonical JSON, so an unknown or extended source
// round-trips verbatim. Safe for concurrent use.
type Source struct {
	kind        SourceKind
	provider    string // model
	model       string // model
	replayState JSON   // model, optional
	plugin      string // plugin
	callID      string // tool
	raw         JSON
}

// ModelSource describes the model that produced an assistant message.
// ReplayState is the adapter's opaque state; the zero JSON means none.
type ModelSource struct {
	Provider    string
	Model       string
	ReplayState JSON
}

// UserSource returns the source of a message typed by a person.
func UserSource() Source {
	return Source{kind: SourceUser, raw: JSON{text: `{"kind":"user"}`}}
}

// ToolSource returns the source of a tool result answering callID.
func ToolSource(callID string) Source {
	var o ObjectBuilder
	return Source{kind: SourceTool, callID: callID,
		raw: o.String("kind", string(SourceTool)).String("callId", callID).Build()}
}

// PluginSource returns a plugin source. extra, when not zero, must be an
// object whose members (form, sections, summary, ...) are added after kind
// and plugin; it may not repeat those two keys.
func PluginSource(plugin string, extra JSON) (Source, error) {
	if plugin == "" {
		return Source{}, fmt.Errorf("messages: plugin source needs a plugin name")
	}
	var o ObjectBuilder
	o.String("kind", string(SourcePlugin)).String("plugin", plugin)
	if !extra.IsZero() {
		if extra.Kind() != KindObject {
			return Source{}, fmt.Errorf("messages: plugin source fields must be an object")
		}
		for k, v := range extra.Members() {
			if k == "kind" || k == "plugin" {
				return Source{}, fmt.Errorf("messages: plugin source fields may not set %q", k)
			}
			o.Raw(k, v)
		}
	}
	return Source{kind: SourcePlugin, plugin: plugin, raw: o.Build()}, nil
}

func newModelSource(m ModelSource) (Source, error) {
	if m.Provider == "" || m.Model == "" {
		return Source{}, fmt.Errorf("messages: model source needs a provider and a model")
	}
	var o ObjectBuilder
	o.String("kind", string(SourceModel)).String("provider", m.Provider).String("model", m.Model).
		Raw("replayState", m.ReplayState)
	return Source{kind: SourceModel, provider: m.Provider, model: m.Model, replayState: m.ReplayState, raw: o.Build()}, nil
}

// parseSource reads a source from its JSON form: an object with a non-empty
// string kind. The fields of the four kinds dsh produces are checked; other
// kinds are kept verbatim.
func parseSource(j JSON) (Source, error) {
	if j.Kind() != KindObject {
		return Source{}, fmt.Errorf("messages: source is not an object")
	}
	k, ok := stringField(j, "kind")
	if !ok || k == "" {
		return Source{}, fmt.Errorf("messages: source lacks a non-empty string kind")
	}
	s := Source{kind: SourceKind(k), raw: j}
	switch s.kind {
	case SourceModel:
		s.provider, _ = stringField(j, "provider")
		s.model, _ = stringField(j, "model")
		if s.provider == "" || s.model == "" {
			return Source{}, fmt.Errorf("messages: model source lacks provider/model")
		}
		s.replayState, _ = j.Field("replayState")
	case SourceTool:
		if s.callID, ok = stringField(j, "callId"); !ok {
			return Source{}, fmt.Errorf("messages: tool source lacks a string callId")
		}
	case SourcePlugin:
		if s.plugin, ok = stringField(j, "plugin"); !ok {
			return Source{}, fmt.Errorf("messages: plugin source lacks a string plugin")
		}
	}
	return s, nil
}

// Kind returns the source kind.
func (s Source) Kind() SourceKind { return s.kind }

// Provider returns the provider of a model source.
func (s Source) Provider() string { return s.provider }

// Model returns the model of a model source.
func (s Source) Model() string { return s.model }

// ReplayState returns the adapter's replay state of a model source (zero
// when absent).
func (s Source) ReplayState() JSON { return s.replayState }

// Plugin returns the plugin name of a plugin source.
func (s Source) Plugin() string { return s.plugin }

// CallID returns the call id of a tool source.
func (s Source) CallID() string { return s.callID }

// Field returns any member of the source's JSON (form, sections, ...).
func (s Source) Field(key string) (JSON, bool) { return s.raw.Field(key) }

// JSON returns the source's canonical JSON.
func (s Source) JSON() JSON { return s.raw }

// IsZero reports whether s is the zero Source (no kind).
func (s Source) IsZero() bool { return s.kind == "" }

// MarshalJSON implements json.Marshaler.
func (s Source) MarshalJSON() ([]byte, error) { return s.raw.MarshalJSON() }
