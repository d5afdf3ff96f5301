package agent

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

func TestTodoWriteToolHonoursCancellation(t *testing.T) {
	var emitted []session.Draft
	call := Call{Name: "todo_write", Input: messages.MustParseJSON(`{"todos":[{"content":"a","status":"pending"}]}`),
		emit: func(d session.Draft) { emitted = append(emitted, d) }}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := TodoWriteTool{}.Execute(ctx, call)
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, emitted, "a cancelled call records nothing")
	require.Equal(t, "ABORTED", runTool(ctx, TodoWriteTool{}, call).Error.Code)

	r, err := TodoWriteTool{}.Execute(context.Background(), call)
	require.NoError(t, err)
	require.False(t, r.IsError)
	require.Len(t, emitted, 1)
}
