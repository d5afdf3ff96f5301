package fstools

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/messages"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fixture builds a workdir with a few files and, beside it, a secret the
// tools must never reach.
func fixture(t *testing.T) (*Set, string) {
	t.Helper()
	top := t.TempDir()
	wd := filepath.Join(top, "work")
	require.NoError(t, os.MkdirAll(filepath.Join(wd, "sub", "deep"), 0o755))
	write := func(p, s string) {
		require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
	}
	write(filepath.Join(top, "secret.txt"), "TOP SECRET\n")
	write(filepath.Join(wd, "a.txt"), "one\ntwo\nthree\nfour\n")
	write(filepath.Join(wd, "empty.txt"), "")
	write(filepath.Join(wd, "bin.dat"), "ab\x00cd")
	write(filepath.Join(wd, "sub", "b.go"), "package sub\n\nfunc Hello() {}\n")
	write(filepath.Join(wd, "sub", "deep", "c.go"), "package deep\n// Hello there\n")
	require.NoError(t, os.Symlink(filepath.Join(top, "secret.txt"), filepath.Join(wd, "escape.txt")))
	require.NoError(t, os.Symlink(top, filepath.Join(wd, "updir")))
	require.NoError(t, os.Symlink("a.txt", filepath.Join(wd, "alias.txt")))
	s, err := New(wd)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s, wd
}

func call(t *testing.T, s *Set, name, args string) agent.Result {
	t.Helper()
	for _, tool := range s.Tools() {
		if tool.Name() == name {
			r, err := tool.Execute(context.Background(), agent.Call{Name: name, Arguments: args, Input: messages.MustParseJSON(args)})
			require.NoError(t, err)
			return r
		}
	}
	t.Fatalf("no tool %q", name)
	return agent.Result{}
}

func text(r agent.Result) string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text())
	}
	return b.String()
}

func ok(t *testing.T, r agent.Result) string {
	t.Helper()
	require.False(t, r.IsError, text(r))
	return text(r)
}

func refused(t *testing.T, r agent.Result, code string) string {
	t.Helper()
	require.True(t, r.IsError, text(r))
	require.Equal(t, code, r.Error.Code, text(r))
	require.Equal(t, "FileToolError", r.Error.Name)
	require.NotContains(t, text(r), "TOP SECRET")
	return text(r)
}

func TestSchemasAndModes(t *testing.T) {
	s, _ := fixture(t)
	reg, err := agent.NewRegistry(s.Tools()...)
	require.NoError(t, err)
	var names []string
	for _, sc := range reg.Schemas() {
		names = append(names, sc.Name)
		require.NotEmpty(t, sc.Description)
		require.Equal(t, messages.KindObject, sc.Parameters.Kind())
	}
	require.Equal(t, []string{"glob", "grep", "list_dir", "read_file"}, names)
	for _, tool := range s.Tools() {
		require.Equal(t, agent.Parallel, tool.Mode(messages.MustParseJSON(`{}`)))
	}
}

func TestReadFile(t *testing.T) {
	s, wd := fixture(t)
	out := ok(t, call(t, s, "read_file", `{"path":"a.txt"}`))
	require.Equal(t, "     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour\n", out)
	out = ok(t, call(t, s, "read_file", `{"path":"a.txt","offset":2,"limit":2}`))
	require.Equal(t, "     2\ttwo\n     3\tthree\n(more lines follow: read on with offset 4)\n", out)
	require.Contains(t, ok(t, call(t, s, "read_file", `{"path":"alias.txt"}`)), "one")
	require.Contains(t, ok(t, call(t, s, "read_file", `{"path":"`+filepath.Join(wd, "sub", "b.go")+`"}`)), "func Hello")
	require.Contains(t, ok(t, call(t, s, "read_file", `{"path":"sub/../a.txt"}`)), "one")
	require.Contains(t, ok(t, call(t, s, "read_file", `{"path":"empty.txt"}`)), "is empty")

	refused(t, call(t, s, "read_file", `{"path":"nope.txt"}`), CodeNotFound)
	refused(t, call(t, s, "read_file", `{"path":"sub"}`), CodeNotAFile)
	refused(t, call(t, s, "read_file", `{"path":"bin.dat"}`), CodeBinaryFile)
	refused(t, call(t, s, "read_file", `{}`), CodeBadInput)
	refused(t, call(t, s, "read_file", `{"path":3}`), CodeBadInput)
	refused(t, call(t, s, "read_file", `{"path":"a.txt","offset":0}`), CodeBadInput)
	refused(t, call(t, s, "read_file", `{"path":"a.txt","offset":9}`), CodeBadInput)
	refused(t, call(t, s, "read_file", `[1]`), CodeBadInput)
}

func TestEscapesAreRefused(t *testing.T) {
	s, wd := fixture(t)
	for _, p := range []string{
		"../secret.txt",
		"sub/../../secret.txt",
		"..",
		filepath.Join(filepath.Dir(wd), "secret.txt"),
		"/etc/passwd",
	} {
		msg := refused(t, call(t, s, "read_file", `{"path":"`+p+`"}`), CodeOutside)
		require.Contains(t, msg, "outside the workdir")
		refused(t, call(t, s, "list_dir", `{"path":"`+p+`"}`), CodeOutside)
		refused(t, call(t, s, "glob", `{"pattern":"*","path":"`+p+`"}`), CodeOutside)
		refused(t, call(t, s, "grep", `{"pattern":"SECRET","path":"`+p+`"}`), CodeOutside)
	}
	// Symlinks that resolve outside are refused at open time.
	refused(t, call(t, s, "read_file", `{"path":"escape.txt"}`), CodeOutside)
	refused(t, call(t, s, "read_file", `{"path":"updir/secret.txt"}`), CodeOutside)
	refused(t, call(t, s, "list_dir", `{"path":"updir"}`), CodeOutside)
	refused(t, call(t, s, "grep", `{"pattern":"SECRET","path":"escape.txt"}`), CodeOutside)
	// Walks do not follow them either.
	require.Equal(t, "(no matches)", ok(t, call(t, s, "grep", `{"pattern":"SECRET"}`)))
	require.NotContains(t, ok(t, call(t, s, "glob", `{"pattern":"**/secret.txt"}`)), "secret")
}

func TestListDir(t *testing.T) {
	s, _ := fixture(t)
	out := ok(t, call(t, s, "list_dir", `{}`))
	require.Equal(t, "a.txt\nalias.txt@\nbin.dat\nempty.txt\nescape.txt@\nsub/\nupdir@\n", out)
	require.Equal(t, "b.go\ndeep/\n", ok(t, call(t, s, "list_dir", `{"path":"sub"}`)))
	refused(t, call(t, s, "list_dir", `{"path":"a.txt"}`), CodeNotADir)
	refused(t, call(t, s, "list_dir", `{"path":"missing"}`), CodeNotFound)
}

func TestGlob(t *testing.T) {
	s, _ := fixture(t)
	require.Equal(t, "sub/b.go\nsub/deep/c.go\n", ok(t, call(t, s, "glob", `{"pattern":"**/*.go"}`)))
	require.Equal(t, "sub/b.go\n", ok(t, call(t, s, "glob", `{"pattern":"*.go","path":"sub"}`)))
	require.Equal(t, "sub/deep/c.go\n", ok(t, call(t, s, "glob", `{"pattern":"sub/*/c.go"}`)))
	require.Equal(t, "(no matches)", ok(t, call(t, s, "glob", `{"pattern":"*.rs"}`)))
	refused(t, call(t, s, "glob", `{"pattern":"[x"}`), CodeBadInput)
	refused(t, call(t, s, "glob", `{}`), CodeBadInput)
}

func TestGrep(t *testing.T) {
	s, _ := fixture(t)
	require.Equal(t, "sub/b.go:3:func Hello() {}\nsub/deep/c.go:2:// Hello there\n",
		ok(t, call(t, s, "grep", `{"pattern":"Hello"}`)))
	require.Equal(t, "sub/deep/c.go:2:// Hello there\n",
		ok(t, call(t, s, "grep", `{"pattern":"Hello","path":"sub/deep"}`)))
	require.Equal(t, "sub/b.go:3:func Hello() {}\n",
		ok(t, call(t, s, "grep", `{"pattern":"Hello","path":"sub/b.go"}`)))
	require.Equal(t, "a.txt:2:two\n", ok(t, call(t, s, "grep", `{"pattern":"^t.o$","include":"*.txt"}`)))
	refused(t, call(t, s, "grep", `{"pattern":"("}`), CodeBadInput)
}

func TestConcurrentCalls(t *testing.T) {
	s, _ := fixture(t)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			args := []string{`{"path":"a.txt"}`, `{"path":"../secret.txt"}`}[i%2]
			tool := s.Tools()[0]
			r, err := tool.Execute(context.Background(), agent.Call{Name: "read_file", Input: messages.MustParseJSON(args)})
			require.NoError(t, err)
			require.Equal(t, i%2 == 1, r.IsError)
		})
	}
	wg.Wait()
}

func TestCancelledWalk(t *testing.T) {
	s, _ := fixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var g agent.Tool
	for _, tool := range s.Tools() {
		if tool.Name() == "grep" {
			g = tool
		}
	}
	_, err := g.Execute(ctx, agent.Call{Name: "grep", Input: messages.MustParseJSON(`{"pattern":"x"}`)})
	require.ErrorIs(t, err, context.Canceled, "a cancelled call returns ctx's error, which the agent records as aborted")
}

func TestClosedSet(t *testing.T) {
	s, _ := fixture(t)
	require.NoError(t, s.Close())
	require.True(t, call(t, s, "read_file", `{"path":"a.txt"}`).IsError)
}

func TestNewRejectsMissingDir(t *testing.T) {
	_, err := New(filepath.Join(t.TempDir(), "missing"))
	require.Error(t, err)
}
