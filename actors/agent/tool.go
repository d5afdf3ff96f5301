package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// Mode is a tool call's execution mode (docs/agent-loop.md#tool-calls).
type Mode uint8

const (
	// Parallel calls run in a rolling pool of at most MaxParallelTools.
	Parallel Mode = iota
	// Exclusive calls run alone, as a barrier between the calls before
	// and after them.
	Exclusive
)

// Call is one tool call as the model made it. Input is the parsed
// arguments: {} for an empty string, the zero JSON when the arguments are
// not valid JSON (Arguments still has them verbatim, as the reference
// passes the raw string through).
type Call struct {
	Turn, Step int64
	ID         string
	Name       string
	Arguments  string
	Input      messages.JSON
	emit       func(session.Draft)
}

// Emit asks the agent to append d to the session log now: after the
// call's tool/call and before its tool/result (todo_write's todo/write).
// Safe to call from the tool's goroutine until Execute returns; later
// calls are dropped. A draft whose record would be longer than the log
// reader accepts is refused here, and nothing is appended: the error is
// a *session.TooLargeError (errors.Is session.ErrTooLarge).
func (c Call) Emit(d session.Draft) error {
	if err := session.CheckDraftSize(d); err != nil {
		return fmt.Errorf("agent: tool %q emits an event: %w", c.Name, err)
	}
	if c.emit != nil {
		c.emit(d)
	}
	return nil
}

// Result is what a tool call produced. Content is the tool-result
// content; IsError marks a failure the model should see; Error, when not
// zero, is the typed error recorded with the result; Meta is opaque JSON
// recorded with it. AdditionalContexts enter the inbox's next-step list
// (loop origin) after the result commits. ConcludesTurn ends the turn
// after this step even though the model is owed a follow-up request.
// The slices belong to the agent once Execute returns.
type Result struct {
	Content            []messages.ContentBlock
	IsError            bool
	Error              session.ToolError
	Meta               messages.JSON
	AdditionalContexts []messages.Message
	ConcludesTurn      bool
}

// Tool is a function the model may call. Implementations must be safe
// for concurrent use: parallel calls run at once, each in its own
// goroutine. Execute must return promptly once ctx is cancelled (the
// turn was aborted, or the agent is stopping); a non-nil error becomes an
// error result (ABORTED when ctx was cancelled). A panic in Execute or in
// Mode (which is called inside the agent's Receive and must not block) is
// the call's TOOL_PANIC error result; Schema is called once, by Props.
type Tool interface {
	Name() string
	Schema() messages.ToolSchema
	Mode(input messages.JSON) Mode
	Execute(ctx context.Context, call Call) (Result, error)
}

// Registry is an immutable set of tools, keyed by name. Safe for
// concurrent use.
type Registry struct {
	tools map[string]Tool
	names []string // sorted
}

// NewRegistry returns a registry of tools; a duplicate or empty name is
// an error.
func NewRegistry(tools ...Tool) (*Registry, error) {
	r := &Registry{tools: make(map[string]Tool, len(tools))}
	for _, t := range tools {
		n := t.Name()
		if n == "" {
			return nil, errors.New("agent: tool with an empty name")
		}
		if _, dup := r.tools[n]; dup {
			return nil, fmt.Errorf("agent: duplicate tool %q", n)
		}
		r.tools[n] = t
		r.names = append(r.names, n)
	}
	slices.Sort(r.names)
	return r, nil
}

// lookup returns the tool called name.
func (r *Registry) lookup(name string) (Tool, bool) {
	if r == nil {
		return nil, false
	}
	t, ok := r.tools[name]
	return t, ok
}

// Schemas returns the tools' schemas in canonical (lexicographic) order;
// the slice is owned by the caller.
func (r *Registry) Schemas() []messages.ToolSchema {
	if r == nil {
		return nil
	}
	out := make([]messages.ToolSchema, 0, len(r.names))
	for _, n := range r.names {
		out = append(out, r.tools[n].Schema())
	}
	return out
}

// modeOf classifies a call: unknown tools run exclusive (their result is
// an error, produced at once, so the choice only keeps ordering simple).
func (r *Registry) modeOf(name string, input messages.JSON) Mode {
	t, ok := r.lookup(name)
	if !ok {
		return Exclusive
	}
	return t.Mode(input)
}

// parseInput is the reference's JSON.parse of the arguments: "" is {},
// invalid JSON is the zero JSON.
func parseInput(args string) messages.JSON {
	if strings.TrimSpace(args) == "" {
		return messages.MustParseJSON("{}")
	}
	j, err := messages.ParseJSONString(args)
	if err != nil {
		return messages.JSON{}
	}
	return j
}

// The synthetic results of docs/agent-loop.md#tool-calls.
func abortedBeforeDispatch() Result {
	return Result{Content: []messages.ContentBlock{messages.TextBlock("Error: tool call aborted before dispatch")},
		IsError: true, Error: session.ToolError{Name: "AbortError", Code: "ABORTED_BEFORE_DISPATCH"}}
}

func abortedResult() Result {
	return Result{Content: []messages.ContentBlock{messages.TextBlock("Error: tool call aborted")},
		IsError: true, Error: session.ToolError{Name: "AbortError", Code: "ABORTED"}}
}

func errorResult(name, code string, err error) Result {
	return Result{Content: []messages.ContentBlock{messages.TextBlock("Error: " + err.Error())},
		IsError: true, Error: session.ToolError{Name: name, Code: code}}
}

// tooLargeResult replaces r, a result of tool name whose record the log
// would refuse (err, a *session.TooLargeError), with the error result
// TOOL_OUTPUT_TOO_LARGE that names the size and the limit. Its
// AdditionalContexts and ConcludesTurn are kept; its Meta is dropped (it
// may be what made the record too large).
func tooLargeResult(name string, r Result, err error) Result {
	out := errorResult("ToolOutputTooLargeError", "TOOL_OUTPUT_TOO_LARGE",
		fmt.Errorf("the output of tool %q is too large to record: %w", name, err))
	out.AdditionalContexts, out.ConcludesTurn = r.AdditionalContexts, r.ConcludesTurn
	return out
}

// runTool executes call with t (nil when unknown), turning every failure
// into an error result. It runs in a goroutine owned by the agent shell.
func runTool(ctx context.Context, t Tool, call Call) (res Result) {
	if t == nil {
		return errorResult("ToolNotFoundError", "TOOL_NOT_FOUND", fmt.Errorf("unknown tool %q", call.Name))
	}
	defer func() {
		if v := recover(); v != nil {
			res = errorResult("ToolPanicError", "TOOL_PANIC", fmt.Errorf("tool %q panicked: %v", call.Name, v))
		}
	}()
	r, err := t.Execute(ctx, call)
	switch {
	case err != nil && ctx.Err() != nil:
		return abortedResult()
	case err != nil:
		return errorResult("ToolError", "TOOL_ERROR", err)
	}
	return r
}

// TodoWriteTool is the built-in todo_write tool: it records the whole todo list
// as a todo/write event (docs/session-log.md#event-catalogue), between its
// tool/call and tool/result. Exclusive: two writes must not race.
type TodoWriteTool struct{}

// Name returns "todo_write".
func (TodoWriteTool) Name() string { return "todo_write" }

// Schema returns the tool's schema.
func (TodoWriteTool) Schema() messages.ToolSchema {
	return messages.ToolSchema{Name: "todo_write", Description: "Replace the session's todo list.",
		Parameters: messages.MustParseJSON(`{"type":"object","properties":{"todos":{"type":"array","items":` +
			`{"type":"object","properties":{"content":{"type":"string"},"status":{"type":"string",` +
			`"enum":["pending","in_progress","completed"]}},"required":["content","status"]}}},"required":["todos"]}`)}
}

// Mode returns Exclusive.
func (TodoWriteTool) Mode(messages.JSON) Mode { return Exclusive }

// Execute validates the list, emits todo/write, and answers with a short
// confirmation. Once ctx is cancelled it returns ctx's error and emits
// nothing (a list of any length is checked item by item).
func (TodoWriteTool) Execute(ctx context.Context, call Call) (Result, error) {
	list, ok := call.Input.Field("todos")
	if !ok || list.Kind() != messages.KindArray {
		return Result{}, errors.New("todo_write: todos must be an array")
	}
	var todos []session.Todo
	for item := range list.Elements() {
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		c, _ := item.Field("content")
		s, _ := item.Field("status")
		content, ok1 := c.AsString()
		status, ok2 := s.AsString()
		if !ok1 || !ok2 {
			return Result{}, errors.New("todo_write: each todo needs a string content and status")
		}
		todos = append(todos, session.Todo{Content: content, Status: status})
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if err := call.Emit(session.NewTodoWrite(todos).Draft()); err != nil {
		return Result{}, err
	}
	return Result{Content: []messages.ContentBlock{messages.TextBlock("Todos updated.")}}, nil
}

// Permission is a tools/pre-execute decision
// (docs/agent-loop.md#extension-points).
type Permission uint8

const (
	// Allow runs the tool body.
	Allow Permission = iota
	// Deny answers the call with a TOOL_DENIED error result; the body
	// does not run.
	Deny
	// Ask defers to Hooks.Approver; without one it is treated as Deny
	// (there is nobody to ask), with a result that says so.
	Ask
)

// PreExecuteDecision is a tools/pre-execute answer. Reason, when not
// empty, is quoted in a denial's result text and passed to the approver.
type PreExecuteDecision struct {
	Permission Permission
	Reason     string
}

// ToolPreExecuteHook is tools/pre-execute: the gate in front of every
// dispatched tool body (not the synthetic ABORTED_BEFORE_DISPATCH
// results). It runs in the call's goroutine, after tool/call is
// recorded, under the turn's abort signal, and may block. An error is
// answered with a TOOL_HOOK_ERROR result (the turn goes on: the log
// stays balanced, and the model sees why).
type ToolPreExecuteHook interface {
	PreExecute(ctx context.Context, call Call) (PreExecuteDecision, error)
}

// ToolApprover answers an Ask: true runs the body. It runs in the call's
// goroutine and may block (a human in the loop) until ctx is cancelled.
// An error is answered like a pre-execute hook error.
type ToolApprover interface {
	Approve(ctx context.Context, call Call, reason string) (bool, error)
}

// PostExecuteDecision is a tools/post-execute answer: Block replaces the
// result by a TOOL_RESULT_BLOCKED error (Reason quoted); either way
// AdditionalContexts are added to the result's, entering next-step after
// the result commits. The slice belongs to the agent once returned.
type PostExecuteDecision struct {
	Block              bool
	Reason             string
	AdditionalContexts []messages.Message
}

// ToolPostExecuteHook is tools/post-execute: it sees the result of every
// tool body that ran (not denials, not synthetic results). It runs in
// the call's goroutine right after the body, so it may block; results
// still commit strictly in model order. The rejected alternative, running
// it at commit time in model order as the reference's finalisation does,
// would run it inside the actor's Receive, where nothing may block. An
// error is answered with a TOOL_HOOK_ERROR result.
type ToolPostExecuteHook interface {
	PostExecute(ctx context.Context, call Call, r Result) (PostExecuteDecision, error)
}

func deniedResult(reason string) Result {
	text := "Error: tool call denied"
	if reason != "" {
		text += ": " + reason
	}
	return Result{Content: []messages.ContentBlock{messages.TextBlock(text)},
		IsError: true, Error: session.ToolError{Name: "ToolDeniedError", Code: "TOOL_DENIED"}}
}

func hookErrorResult(point string, err error) Result {
	return errorResult("ToolHookError", "TOOL_HOOK_ERROR", fmt.Errorf("%s hook failed: %w", point, err))
}

// executeCall is the pipeline of one dispatched call
// (docs/agent-loop.md#tool-calls, docs/agent-loop.md#extension-points):
// pre-execute (and the approver), the body, then post-execute. It runs in a
// goroutine owned by the agent shell.
func executeCall(ctx context.Context, t Tool, call Call, h Hooks) Result {
	if h.PreExecute != nil {
		dec, err := safeHook(func() (PreExecuteDecision, error) { return h.PreExecute.PreExecute(ctx, call) })
		switch {
		case err != nil && ctx.Err() != nil:
			return abortedResult()
		case err != nil:
			return hookErrorResult("pre-execute", err)
		case dec.Permission == Deny:
			return deniedResult(dec.Reason)
		case dec.Permission == Ask && h.Approver == nil:
			reason := "approval required and no approver is configured"
			if dec.Reason != "" {
				reason += " (" + dec.Reason + ")"
			}
			return deniedResult(reason)
		case dec.Permission == Ask:
			ok, err := safeHook(func() (bool, error) { return h.Approver.Approve(ctx, call, dec.Reason) })
			switch {
			case err != nil && ctx.Err() != nil:
				return abortedResult()
			case err != nil:
				return hookErrorResult("approval", err)
			case !ok:
				return deniedResult("not approved")
			}
		}
	}
	r := runTool(ctx, t, call)
	if h.PostExecute == nil || t == nil {
		return r
	}
	dec, err := safeHook(func() (PostExecuteDecision, error) { return h.PostExecute.PostExecute(ctx, call, r) })
	switch {
	case err != nil && ctx.Err() != nil:
		return abortedResult()
	case err != nil:
		return hookErrorResult("post-execute", err)
	}
	if dec.Block {
		text := "Error: tool result blocked"
		if dec.Reason != "" {
			text += ": " + dec.Reason
		}
		// The body's own contexts go with its blocked content.
		r = Result{Content: []messages.ContentBlock{messages.TextBlock(text)}, IsError: true,
			Error: session.ToolError{Name: "ToolBlockedError", Code: "TOOL_RESULT_BLOCKED"}}
	}
	r.AdditionalContexts = append(r.AdditionalContexts, dec.AdditionalContexts...)
	return r
}

// safeHook calls fn, turning a panic into an error.
func safeHook[T any](fn func() (T, error)) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("hook panicked: %v", p)
		}
	}()
	return fn()
}
