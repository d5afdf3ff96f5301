package agent

import (
	"context"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// modePanicTool is a tool whose Mode panics.
type modePanicTool struct{ fakeTool }

func (modePanicTool) Mode(messages.JSON) Mode { panic("mode exploded") }

// requireFailed waits for the observer's TurnFailed and checks it.
func requireFailed(t *testing.T, failed <-chan TurnFailed, want TurnFailed) {
	t.Helper()
	select {
	case f := <-failed:
		require.Equal(t, want, f)
	case <-time.After(waitFor):
		t.Fatal("no TurnFailed")
	}
}

// A tool's Mode panicking is that call's error result, as a panicking
// body is (TOOL_PANIC): the body does not run, the other calls do, the
// turn goes on and completes, and the agent is not restarted.
func TestToolModePanicIsTheCallsError(t *testing.T) {
	ran := make(chan string, 4)
	echo := fakeTool{name: "echo", fn: func(context.Context, Call) (Result, error) {
		ran <- "echo"
		return Result{Content: []messages.ContentBlock{messages.TextBlock("echo ran")}}, nil
	}}
	boom := modePanicTool{fakeTool{name: "boom", fn: func(context.Context, Call) (Result, error) {
		ran <- "boom"
		return Result{}, nil
	}}}
	failed := make(chan TurnFailed, 4)
	mock := newMock(toolCallResponse(tc{"c1", "boom", `{}`}, tc{"c2", "echo", `{}`}), textResponse("done"))
	h := newHarness(t, mock, nil, withTools(t, echo, boom), withFailures(t, failed))
	h.followup("one")
	h.waitIdle()
	es := h.events()
	requireBalanced(t, es)
	results := ofType(es, session.TypeToolResult)
	require.Len(t, results, 2)
	r1 := results[0].Payload().(session.ToolResult)
	require.Equal(t, session.ToolError{Name: "ToolPanicError", Code: "TOOL_PANIC"}, r1.Error)
	b := r1.Message.Block(0)
	require.Equal(t, "c1", b.ToolCallID())
	require.True(t, b.IsError())
	var text string
	for n := range b.NestedBlocks() {
		text += n.Text()
	}
	require.Equal(t, `Error: tool "boom" mode panicked: mode exploded`, text)
	r2 := results[1].Payload().(session.ToolResult)
	require.Equal(t, "c2", r2.Message.Block(0).ToolCallID())
	require.False(t, r2.Message.Block(0).IsError())
	require.Equal(t, "echo", <-ran, "only echo's body ran")
	require.Empty(t, ran)
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}}, turnEnds(es))
	require.Empty(t, failed)

	h.followup("two")
	h.waitIdle()
	es = h.events()
	requireBalanced(t, es)
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}, {Kind: session.EndCompleted}}, turnEnds(es),
		"no restart (one would have closed turn 1 interrupted)")
}

// A compaction callback's panic (EstimateTokens, NewID) is contained:
// inside a turn it ends the turn in error naming the panic (TurnFailed),
// at the pressure check, when the shadowed span is picked, when the id is
// minted or when the pruner estimates a result; a bracket already open is
// closed with the error. A manual Compact is answered CompactFailed.
// Either way the agent lives on: the next followup completes.
func TestCompactionCallbackPanicIsContained(t *testing.T) {
	estimatePanicsOnce := func() func(messages.Message) int {
		boom := panicOnce()
		return func(m messages.Message) int {
			boom()
			return estimateMessageTokens(m)
		}
	}
	idPanicsOnce := func() func() string {
		boom := panicOnce()
		return func() string {
			boom()
			return "cmp-1"
		}
	}
	const estimateErr = "agent: estimate-tokens callback panicked: hook exploded"
	const idErr = "agent: new-id callback panicked: hook exploded"
	cases := map[string]struct {
		log    func(t *testing.T) *session.Log
		script []entry
		cfg    func(c *Config)
		err    string
		steps  int // step/starts of the failed turn
		turn   int64
		// bracket: the compaction events the failed turn logged
		bracket []session.EventType
	}{
		"estimate at pressure": {
			cfg: func(c *Config) {
				c.Compaction.EstimateTokens = estimatePanicsOnce()
				c.Routes = func(string, string) Route { return Route{ContextWindow: messages.Some(1_000_000)} }
			},
			err: estimateErr, steps: 0, turn: 1,
		},
		"estimate at overflow": {
			script: []entry{overflowFinish()},
			cfg:    func(c *Config) { c.Compaction.EstimateTokens = estimatePanicsOnce() },
			err:    estimateErr, steps: 1, turn: 1,
		},
		"new-id at overflow": {
			script: []entry{overflowFinish()},
			cfg:    func(c *Config) { c.Compaction.NewID = idPanicsOnce() },
			err:    idErr, steps: 1, turn: 1,
		},
		"estimate at prune": {
			log: func(t *testing.T) *session.Log {
				l, _, _, _ := prunableLog(t)
				return l
			},
			script: []entry{overflowFinish()},
			cfg: func(c *Config) {
				// The big result is estimated once when the span is
				// picked, and again by the pruner: that call panics.
				seen := map[messages.MessageID]int{}
				c.Compaction.PruneToolResultBytes = 1000
				c.Compaction.NewID = fixedIDs("cmp-p")
				c.Compaction.EstimateTokens = func(m messages.Message) int {
					n := estimateMessageTokens(m)
					if seen[m.ID()]++; seen[m.ID()] == 2 && n > 1000 {
						panic("hook exploded")
					}
					return n
				}
			},
			err: estimateErr, steps: 1, turn: 2,
			bracket: []session.EventType{session.TypeCompactionStart, session.TypeCompactionEnd},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var l *session.Log
			if tc.log != nil {
				l = tc.log(t)
			}
			failed := make(chan TurnFailed, 4)
			h := newHarness(t, newMock(tc.script...), l, withFailures(t, failed), func(_ *harness, c *Config) {
				c.NoRetry = true
				tc.cfg(c)
			})
			before := len(h.events())
			h.followup(longPremise)
			h.waitIdle()
			es := h.events()
			requireBalanced(t, es)
			turn := es[before:]
			require.Len(t, ofType(turn, session.TypeStepStart), tc.steps)
			bracket := types(ofType(turn, session.TypeCompactionStart, session.TypeCompactionSum,
				session.TypeCompactionEnd))
			if len(bracket) == 0 {
				bracket = nil
			}
			require.Equal(t, tc.bracket, bracket)
			if len(tc.bracket) > 0 {
				end := ofType(turn, session.TypeCompactionEnd)[0]
				require.JSONEq(t, `{"compactionId":"cmp-p","turn":2,"error":"`+tc.err+`"}`, end.Data().String())
			}
			end := lastEnd(t, es)
			require.Equal(t, session.EndError, end.Kind)
			require.Equal(t, tc.err, end.Error.Message)
			requireFailed(t, failed, TurnFailed{Turn: tc.turn, Step: 1, Error: end.Error})

			h.followup("two")
			h.waitIdle()
			es = h.events()
			requireBalanced(t, es)
			ends := turnEnds(es)
			require.Equal(t, []session.TurnEndReason{end, {Kind: session.EndCompleted}}, ends[len(ends)-2:],
				"no restart (one would have closed the turn interrupted)")
		})
	}

	t.Run("manual", func(t *testing.T) {
		h := newHarness(t, newMock(), nil, func(_ *harness, c *Config) { c.Compaction.NewID = idPanicsOnce() })
		h.followup(longPremise)
		h.waitIdle()
		n := len(h.events())
		h.refs++
		require.Equal(t, Compacted{Ref: h.refs, Outcome: CompactFailed, Error: idErr}, h.ask(Compact{Ref: h.refs}))
		require.Len(t, h.events(), n, "nothing logged: the bracket never opened")
		h.followup("two")
		h.waitIdle()
		es := h.events()
		requireBalanced(t, es)
		require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}, {Kind: session.EndCompleted}}, turnEnds(es))
	})
}

// A tool's Schema panicking is refused by Props (the actor never asks for
// the schemas inside Receive).
func TestSchemaPanicRefusedByProps(t *testing.T) {
	r, err := NewRegistry(schemaPanicTool{fakeTool{name: "bad"}})
	require.NoError(t, err)
	_, err = Props(Config{Session: actor.NewPID("local", "session"), Provider: newMock(), Model: "m", Tools: r})
	require.EqualError(t, err, "agent: configuration callback panicked: schema exploded")
}

// schemaPanicTool is a tool whose Schema panics.
type schemaPanicTool struct{ fakeTool }

func (schemaPanicTool) Schema() messages.ToolSchema { panic("schema exploded") }
