package inbox

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testNow int64 = 1_700_000_000_000

func testHeader(id session.SessionID) session.Header {
	return session.Header{ID: id, CreatedAt: 1, Cwd: "/work/project"}
}

func newLog(t testing.TB) *session.Log {
	t.Helper()
	l, err := session.New(testHeader("inbox-test"))
	require.NoError(t, err)
	return l
}

func newState(t testing.TB, cfg Config) *State {
	t.Helper()
	s, err := newEmptyState(cfg)
	require.NoError(t, err)
	return s
}

// user returns a user message holding one text block, with a fresh id.
func user(t testing.TB, text string) messages.Message {
	t.Helper()
	m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(text)}, messages.UserSource())
	require.NoError(t, err)
	return m
}

// userWithID returns a user message with a given id.
func userWithID(t testing.TB, id, text string) messages.Message {
	t.Helper()
	m, err := messages.ImportMessage(messages.MustParseJSON(
		fmt.Sprintf(`{"id":%q,"role":"user","content":[{"type":"text","text":%q}],"source":{"kind":"user"}}`, id, text)))
	require.NoError(t, err)
	return m
}

// pluginContext returns a plugin-sourced context message (a tool's
// additional context).
func pluginContext(t testing.TB, text string) messages.Message {
	t.Helper()
	src, err := messages.PluginSource("test-plugin", messages.JSON{})
	require.NoError(t, err)
	m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(text)}, src)
	require.NoError(t, err)
	return m
}

func texts(ms []messages.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Block(0).Text()
	}
	return out
}

// appendOK appends drafts to l as one batch and fails the test on error.
func appendOK(t testing.TB, l *session.Log, drafts ...session.Draft) []session.Event {
	t.Helper()
	es, err := l.AppendBatch(drafts, testNow+l.Len())
	require.NoError(t, err)
	return es
}

// commit appends the plans' drafts to l in one batch, as the actor does,
// and applies each plan to its committed event.
func commit(t testing.TB, s *State, l *session.Log, plans ...splicePlan) []spliceNotices {
	t.Helper()
	es := appendOK(t, l, planDrafts(plans)...)
	out := make([]spliceNotices, len(plans))
	for i, p := range plans {
		n, err := s.apply(p, es[i])
		require.NoError(t, err)
		out[i] = n
	}
	return out
}

// must returns a function that returns p, failing the test on err:
// must(t)(s.planAppend(...)).
func must(t testing.TB) func(splicePlan, error) splicePlan {
	return func(p splicePlan, err error) splicePlan {
		t.Helper()
		require.NoError(t, err)
		return p
	}
}

// requireJSON checks that j is JSON-equal to want.
func requireJSON(t testing.TB, want string, j messages.JSON) {
	t.Helper()
	require.Truef(t, messages.MustParseJSON(want).Equal(j), "want %s\ngot  %s", want, j)
}
