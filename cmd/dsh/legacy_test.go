package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVerifyCountsUpgradedEvents: a log with older shapes verifies, says
// how many events were upgraded on read, and is left byte for byte as it
// was (docs/log-format.md, "Older shapes").
func TestVerifyCountsUpgradedEvents(t *testing.T) {
	text := `{"type":"session","version":0,"id":"s-old","createdAt":0,"delegationDepth":0}
{"type":"turn/start","seq":0,"time":1,"data":{"turn":1,"trigger":{"kind":"message"}}}
{"type":"step/start","seq":1,"time":1,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":2,"time":1,"data":{"content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}
{"type":"step/end","seq":3,"time":1,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":4,"time":1,"data":{"turn":1,"reason":{"kind":"disposed"}}}
`
	path := filepath.Join(t.TempDir(), "session.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	code, out, errOut := runDsh("log", "verify", path)
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, path+": ok: 5 events, 1 turn, 1 derived message; 3 events upgraded from an older shape on read (the file is unchanged)\n", out)
	code, out, _ = runDsh("log", "messages", path)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, `"id":"legacy-message:s-old:2"`)
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, text, string(after))
}
