package agent

import (
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/messages"
)

// Config configures an agent actor. Session and Provider are required,
// and so is Model.
type Config struct {
	// Session is the session actor the agent writes to.
	Session *actor.PID
	// Inbox configures the inbox actor the agent spawns as its child.
	Inbox inbox.Config
	// Provider makes the model calls; its Name is the request's provider.
	Provider llm.Provider
	// Model is the model id of every request (unless a Request hook
	// switches it).
	Model string
	// MaxTokens, when present, seeds the request config.
	MaxTokens messages.OptInt
	// System is the system prompt ("" for none).
	System string
	// Tools are the tools offered to the model (nil: none).
	Tools *Registry
	// MaxParallelTools bounds the parallel pool. Default 10.
	MaxParallelTools int
	// Retry is the retry policy of failed model calls (zero: defaults).
	Retry llm.RetryPolicy
	// NoRetry disables retries (unless a RequestError hook asks).
	NoRetry bool
	// Routes describes each provider/model route: the fields its adapter
	// materialises (marked adapterDefaults in the request header) and its
	// context window (logged in request/context). Nil: nothing is
	// materialised and no window is known. Called inside Receive; must
	// not block. A panic is recovered and ends the turn in error.
	Routes func(provider, model string) Route
	// StreamTimeout bounds one model call (llm.StreamConfig.Timeout).
	StreamTimeout time.Duration
	// Compaction configures compaction (docs/agent-loop.md#compaction):
	// context-overflow, pressure (needs a route with a ContextWindow) and
	// manual (Compact). The zero value enables it with the defaults.
	Compaction CompactionConfig
	// RuntimeContext holds the dynamic prompt sections (sandbox and approval
	// policy, and so on) that travel as a runtime-context snapshot rather
	// than in the system prompt (docs/agent-loop.md#runtime-context): a
	// plugin-sourced user/message entered with a step's input when its text
	// differs from the last snapshot still on the surface. SetRuntimeContext
	// replaces it while the agent lives. Empty (the default): no snapshot is
	// ever sent, until a SetRuntimeContext.
	RuntimeContext RuntimeContext
	// Hooks are the embedder's hooks.
	Hooks Hooks
	// Observer, when set, receives StatusChanged and TurnFailed.
	Observer *actor.PID
	// ChildOptions configure the actors the agent spawns, its inbox and
	// each model call's stream actor (a host runs their mailboxes on its
	// workers, as it does the agent's: supervisor/workers.go). Default
	// none: protoactor's defaults.
	ChildOptions []actor.PropsOption
}

// Validate reports a missing session, provider or model.
func (c Config) Validate() error {
	if c.Session == nil {
		return errNoSession
	}
	_, err := c.prepare()
	return err
}

var errNoSession = errors.New("agent: config needs a session PID")

// prepare checks everything but Session and derives the core's
// configuration, validated.
func (c Config) prepare() (*driverShared, error) {
	switch {
	case c.Provider == nil:
		return nil, errors.New("agent: config needs a provider")
	case c.Model == "":
		return nil, errors.New("agent: config needs a model")
	}
	dc, err := c.driverConfig()
	if err != nil {
		return nil, err
	}
	return newDriverShared(dc)
}

// driverConfig derives the core's configuration. It asks the tools for
// their schemas and the provider for its name, which is the embedder's
// code: a panic is an error here (Props refuses the config), and Props
// derives it once, so that the actor never calls them inside Receive (a
// panic there would restart the agent, and again at every restart).
func (c Config) driverConfig() (dc driverConfig, err error) {
	defer recoverCallback("configuration", &err)
	dc = driverConfig{Provider: c.Provider.Name(), Model: c.Model, MaxTokens: c.MaxTokens, System: c.System,
		Tools: c.Tools.Schemas(), Modes: c.Tools.modeOf, MaxParallelTools: c.MaxParallelTools, Retry: c.Retry,
		NoRetry: c.NoRetry, PreStep: c.Hooks.PreStep != nil, TurnStopping: c.Hooks.TurnStopping != nil,
		StepEnd: c.Hooks.StepEnd != nil,
		Routes:  c.Routes, Compaction: c.Compaction, RuntimeContext: c.RuntimeContext}
	if h := c.Hooks.Request; h != nil {
		dc.Request = func(in RequestInput) (cfg messages.CallConfig, err error) {
			defer recoverHook("request", &err)
			return h.Request(in)
		}
	}
	if h := c.Hooks.RequestError; h != nil {
		dc.RequestError = func(in RequestErrorInput) (dec RequestErrorDecision, err error) {
			defer recoverHook("request-error", &err)
			return h.RequestError(in)
		}
	}
	return dc, nil
}

// Props returns the props of an agent actor. Props that make many agents
// of one configuration (a host's sessions) use a Template instead.
func Props(cfg Config) (*actor.Props, error) {
	if cfg.Session == nil {
		return nil, errNoSession
	}
	t, err := NewTemplate(cfg)
	if err != nil {
		return nil, err
	}
	return t.Props(cfg.Session)
}

// Template is an agent configuration prepared once for many agents: it is
// validated and its driver configuration derived once, and every agent
// made from it (Template.Props) reads it, shared, instead of holding
// copies of its own (over a kilobyte per agent, for each of a host's
// thousands of idle resident sessions). A Template is
// immutable and safe for concurrent use.
type Template struct {
	cfg    Config // Session unset: each agent names its own
	driver *driverShared
}

// NewTemplate prepares cfg for Template.Props. cfg.Session is not used
// (each agent's is given to Props); the rest is checked as Validate does.
func NewTemplate(cfg Config) (*Template, error) {
	cfg.Session = nil
	ds, err := cfg.prepare()
	if err != nil {
		return nil, err
	}
	return &Template{cfg: cfg, driver: ds}, nil
}

// Props returns the props of an agent actor of t writing to the session
// actor session.
func (t *Template) Props(session *actor.PID) (*actor.Props, error) {
	if session == nil {
		return nil, errNoSession
	}
	lin := &lineage{}
	return actor.PropsFromProducer(func() actor.Actor { return newAgentActor(t, session, lin) }), nil
}

func newAgentActor(t *Template, session *actor.PID, lin *lineage) *agentActor {
	return &agentActor{cfg: &t.cfg, driver: t.driver, session: session, lin: lin}
}
