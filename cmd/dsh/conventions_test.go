package main

import (
	"flag"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm/replay"
	"github.com/dshgo/dsh/messages"
)

// leaf is a command of the table with its path ("log verify").
type leaf struct {
	path string
	c    *command
}

// everyCommand walks the command table: every command and group, with its
// path.
func everyCommand() []leaf {
	var out []leaf
	var walk func(path string, cs []*command)
	walk = func(path string, cs []*command) {
		for _, c := range cs {
			p := strings.TrimSpace(path + " " + c.name)
			out = append(out, leaf{p, c})
			walk(p, c.subs)
		}
	}
	walk("", commands())
	return out
}

func TestHelpOfEveryCommand(t *testing.T) {
	code, top, _ := runDsh("help")
	require.Equal(t, exitOK, code)
	code, out, _ := runDsh("--help")
	require.Equal(t, exitOK, code)
	require.Equal(t, top, out, "dsh help is dsh --help")
	require.Contains(t, top, "NO_COLOR")
	for _, l := range everyCommand() {
		args := strings.Fields(l.path)
		code, viaHelp, errOut := runDsh(append([]string{"help"}, args...)...)
		require.Equal(t, exitOK, code, "dsh help %s: %s", l.path, errOut)
		code, viaFlag, errOut := runDsh(append(args, "--help")...)
		require.Equal(t, exitOK, code, "dsh %s --help: %s", l.path, errOut)
		require.Equal(t, viaFlag, viaHelp, "dsh help %s is dsh %s --help", l.path, l.path)
		require.True(t, strings.HasPrefix(viaHelp, "Usage: dsh "+l.path), "dsh help %s: %q", l.path, viaHelp)
		require.NotContains(t, viaHelp, "Usage:\n  dsh run", "dsh help %s is not the top-level help", l.path)
		if l.c.run != nil && l.path != "log" {
			require.Contains(t, top, "dsh "+l.path, "the top-level help lists %s", l.path)
		}
	}
	code, _, errOut := runDsh("help", "nope")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `unknown command "nope"`)
	code, _, errOut = runDsh("help", "log", "nope")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `log: unknown subcommand "nope"`)
	code, _, _ = runDsh("help", "run", "hello")
	require.Equal(t, exitUsage, code, "help never runs the command")
}

// singleDash finds a flag spelled with one dash: -name after a space, a
// bracket or a quote.
var singleDash = regexp.MustCompile(`(^|[\s(\[,'"])-[a-zA-Z]`)

func TestHelpSpellsEveryFlagWithTwoDashes(t *testing.T) {
	_, top, _ := runDsh("--help")
	require.NotRegexp(t, singleDash, top)
	for _, l := range everyCommand() {
		_, help, _ := runDsh(append(strings.Fields(l.path), "--help")...)
		require.NotRegexp(t, singleDash, help, "dsh %s --help", l.path)
		if l.c.run == nil {
			continue
		}
		var p flagProbe
		_ = l.c.run([]string{"--help"}, &p, nil)
		require.NotNil(t, p.fs, "dsh %s parses its flags with parseFlags", l.path)
		p.fs.VisitAll(func(f *flag.Flag) {
			entry := flagEntry(help, f.Name)
			require.NotEmpty(t, entry, "dsh %s --help lists --%s", l.path, f.Name)
			require.LessOrEqual(t, strings.Count(entry, "(default"), 1, "dsh %s --help: --%s says its default once: %q", l.path, f.Name, entry)
		})
		if strings.Contains(help, "\n  --") {
			require.Contains(t, help, "DSH_BASE_URL", "dsh %s --help says how flags come from the environment", l.path)
		}
	}
}

// flagEntry returns the lines of help that describe --name.
func flagEntry(help, name string) string {
	lines := strings.Split(help, "\n")
	for i, l := range lines {
		if l == "  --"+name || strings.HasPrefix(l, "  --"+name+" ") {
			if i+1 < len(lines) {
				return l + "\n" + lines[i+1]
			}
			return l
		}
	}
	return ""
}

func TestFlagErrorsSpellTwoDashes(t *testing.T) {
	for args, want := range map[string]string{
		"log verify --bogus f":          "log verify: flag provided but not defined: --bogus",
		"log fork --at":                 "log fork: flag needs an argument: --at",
		"log fork --at x f":             `log fork: invalid value "x" for flag --at: `,
		"log stats --json=maybe f":      `log stats: invalid boolean value "maybe" for --json: `,
		"bench --sessions many --quiet": `bench: invalid value "many" for flag --sessions: `,
	} {
		code, _, errOut := runDsh(strings.Fields(args)...)
		require.Equal(t, exitUsage, code, args)
		require.Contains(t, errOut, "dsh: "+want, args)
	}
}

func TestProviderDefaultShownOnce(t *testing.T) {
	_, help, _ := runDsh("run", "--help")
	entry := flagEntry(help, "provider")
	require.Equal(t, 1, strings.Count(entry, "default"), entry)
	require.Contains(t, entry, "else synthetic")
}

func TestTopLevelUsageColumnsAreAligned(t *testing.T) {
	_, top, _ := runDsh("--help")
	col := -1
	n := 0
	for _, l := range strings.Split(top, "\n") {
		if !strings.HasPrefix(l, "  dsh ") {
			continue
		}
		n++
		// Synopses have single spaces: the first double space ends one.
		i := strings.Index(l[2:], "  ") + 2
		for i >= 2 && l[i] == ' ' {
			i++
		}
		require.Positive(t, i, l)
		if col < 0 {
			col = i
		}
		require.Equal(t, col, i, "summary column of %q", l)
	}
	require.Greater(t, n, 15)
}

func TestVersion(t *testing.T) {
	code, out, errOut := runDsh("--version")
	require.Equal(t, exitOK, code, errOut)
	require.Regexp(t, `^dsh (\(devel\)|v\S+)( rev [0-9a-f]+(, modified)?)?\n$`, out)
	code, out2, _ := runDsh("version")
	require.Equal(t, exitOK, code)
	require.Equal(t, out, out2)
	code, _, _ = runDsh("version", "extra")
	require.Equal(t, exitUsage, code)

	require.Equal(t, "dsh (devel)", versionLine(nil), "no build info: (devel), no failure")
	require.Equal(t, "dsh (devel)", versionLine(&debug.BuildInfo{}))
	require.Equal(t, "dsh v1.2.3 rev 0123abcd, modified", versionLine(&debug.BuildInfo{
		Main: debug.Module{Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123abcd"},
			{Key: "vcs.modified", Value: "true"}}}))
	require.Equal(t, "dsh (devel) rev 0123abcd", versionLine(&debug.BuildInfo{
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "false"}}}))
}

func TestFlagsFromTheEnvironment(t *testing.T) {
	path := filepath.Join(mustCorpus(t), "acp", "packed-chunks", "session.jsonl")

	t.Setenv("DSH_FIXTURE", "true")
	t.Setenv("DSH_JSON", "1")
	code, out, errOut := runDsh("log", "stats", path)
	require.Equal(t, exitOK, code, errOut)
	require.True(t, strings.HasPrefix(out, "{"), "DSH_JSON=1 is --json: %q", out)

	code, out, errOut = runDsh("log", "stats", "--json=false", path)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "turns      1", "the command line wins over DSH_JSON")

	t.Setenv("DSH_JSON", "")
	code, out, _ = runDsh("log", "stats", path)
	require.Equal(t, exitOK, code)
	require.False(t, strings.HasPrefix(out, "{"), "an empty variable is unset")

	t.Setenv("DSH_JSON", "maybe")
	code, out, errOut = runDsh("log", "stats", path)
	require.Equal(t, exitUsage, code)
	require.Empty(t, out)
	require.Contains(t, errOut, "$DSH_JSON")
	require.Contains(t, errOut, `"maybe"`)
}

func TestFlagsFromTheEnvironmentYieldToTheirAlternatives(t *testing.T) {
	path := filepath.Join(mustCorpus(t), "acp", "packed-chunks", "session.jsonl")
	dir := t.TempDir()
	t.Setenv("DSH_STORE", "sqlite:"+filepath.Join(dir, "no-such-dir", "x.db"))
	t.Setenv("DSH_SESSION", "some-session")
	code, out, errOut := runDsh("log", "stats", "--fixture", path)
	require.Equal(t, exitOK, code, "a FILE wins over DSH_STORE and DSH_SESSION: %s", errOut)
	require.Contains(t, out, "turns      1")
	code, _, errOut = runDsh("sessions", "--dir", dir)
	require.Equal(t, exitOK, code, "--dir wins over DSH_STORE: %s", errOut)

	code, _, errOut = runDsh("log", "stats")
	require.Equal(t, exitFailure, code, "no FILE: DSH_STORE and DSH_SESSION name the log")
	require.Contains(t, errOut, "no-such-dir")
}

func TestFlagsFromEnvNamesAndPrecedence(t *testing.T) {
	fs := newFlagSet("x")
	baseURL := fs.String("base-url", "", "")
	model := fs.String("model", "m0", "")
	n := fs.Int("n", 1, "")
	require.NoError(t, fs.Parse([]string{"--model", "given"}))
	env := map[string]string{"DSH_BASE_URL": "http://h", "DSH_MODEL": "env", "DSH_N": "7"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	require.NoError(t, flagsFromEnv(fs, lookup, nil))
	require.Equal(t, "http://h", *baseURL, "--base-url reads DSH_BASE_URL")
	require.Equal(t, "given", *model, "the command line wins")
	require.Equal(t, 7, *n)

	env["DSH_N"] = "seven"
	err := flagsFromEnv(newFlagSetWithInt(), lookup, nil)
	var ue *usageError
	require.ErrorAs(t, err, &ue)
	require.Contains(t, err.Error(), "$DSH_N")
}

func newFlagSetWithInt() *flag.FlagSet {
	fs := newFlagSet("x")
	fs.Int("n", 1, "")
	return fs
}

// completions runs the bash script's _dsh on the words typed (the last
// one being completed) and returns what it offers.
func completions(t *testing.T, script string, typed ...string) []string {
	t.Helper()
	args := append([]string{"-c", script + `
COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _dsh; printf '%s\n' "${COMPREPLY[@]}"`, "bash"}, typed...)
	cmd := exec.Command("bash", args...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return strings.Fields(string(out))
}

func TestCompletionScripts(t *testing.T) {
	code, bash, errOut := runDsh("completion", "bash")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, []string{"log"}, completions(t, bash, "dsh", "lo"))
	require.Equal(t, []string{"verify"}, completions(t, bash, "dsh", "log", "ve"))
	require.Equal(t, []string{"--provider"}, completions(t, bash, "dsh", "run", "--prov"))
	require.Equal(t, []string{"--system"}, completions(t, bash, "dsh", "run", "--dir", "d", "--sys"))
	require.Equal(t, []string{"--fixture", "--session", "--store", "--help"}, completions(t, bash, "dsh", "log", "verify", "--"))
	require.Equal(t, []string{"--version"}, completions(t, bash, "dsh", "--ver"))
	require.Equal(t, completionShells, completions(t, bash, "dsh", "completion", ""))
	require.Empty(t, completions(t, bash, "dsh", "log", "verify", "f"), "a FILE: bash's own file names")
	var top []string
	for _, c := range commands() {
		top = append(top, c.name)
	}
	require.Equal(t, top, completions(t, bash, "dsh", ""))
	require.Equal(t, top, completions(t, bash, "dsh", "help", ""))

	code, zsh, _ := runDsh("completion", "zsh")
	require.Equal(t, exitOK, code)
	code, fish, _ := runDsh("completion", "fish")
	require.Equal(t, exitOK, code)
	require.True(t, strings.HasPrefix(zsh, "#compdef dsh\n"))
	for _, n := range completionNodes() {
		require.Contains(t, zsh, "("+n.key+")", "zsh completes after %s", n.key)
		require.Contains(t, fish, "= "+n.key+"'", "fish completes after %s", n.key)
		if len(n.flags) > 0 {
			require.Contains(t, zsh, "("+n.key+") cands=("+strings.Join(n.flags, " ")+")")
		}
		for _, f := range n.flags {
			require.Contains(t, fish, "= "+n.key+"' ", "fish: %s", n.key)
			require.Regexp(t, regexp.QuoteMeta("= "+n.key+"'")+`[^\n]* -l `+regexp.QuoteMeta(strings.TrimPrefix(f, "--"))+`( |\n)`, fish)
		}
	}
	// zsh and fish run the scripts where they are installed: zsh with
	// compadd and _files stubbed (it offers every candidate of the place,
	// compsys filters them), fish with its own complete -C.
	if _, err := exec.LookPath("zsh"); err == nil {
		zshOffers := func(typed string) []string {
			out, err := exec.Command("zsh", "-c", `compdef() {}; compadd() { [[ $1 == -a ]] && print -l -- ${(P)2} }
_files() { print FILES }
`+zsh+`
words=(${=1}); [[ $1 == *" " ]] && words+=(""); CURRENT=${#words}; _dsh`, "zsh", typed).CombinedOutput()
			require.NoError(t, err, "%s", out)
			return strings.Fields(string(out))
		}
		require.Equal(t, top, zshOffers("dsh lo"))
		require.Contains(t, zshOffers("dsh run --prov"), "--provider")
		require.Equal(t, []string{"--fixture", "--session", "--store", "--help"}, zshOffers("dsh log verify --"))
		require.Equal(t, completionShells, zshOffers("dsh completion "))
		require.Equal(t, []string{"FILES"}, zshOffers("dsh log verify f"))
	}
	if _, err := exec.LookPath("fish"); err == nil {
		fishOffers := func(typed string) []string {
			out, err := exec.Command("fish", "-c", fish+"\ncomplete -C $argv[1]", typed).CombinedOutput()
			require.NoError(t, err, "%s", out)
			return strings.Fields(string(out))
		}
		require.Equal(t, []string{"log"}, fishOffers("dsh lo"))
		require.Equal(t, []string{"verify"}, fishOffers("dsh log ve"))
		require.Equal(t, []string{"--provider"}, fishOffers("dsh run --prov"))
		require.Equal(t, []string{"bash", "fish", "zsh"}, fishOffers("dsh completion "))
	}

	code, _, errOut = runDsh("completion", "tcsh")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `unknown shell "tcsh"`)
}

// textModel answers every request with text.
func textModel(text string) talkEnv {
	chunks := []messages.StreamChunk{messages.BlockStartChunk(0, messages.BlockText), messages.TextDeltaChunk(0, text),
		messages.BlockEndChunk(0, messages.TextBlock(text)),
		messages.FinishChunk(messages.FinishReason{Kind: messages.FinishStop}, messages.JSON{})}
	return talkEnv{provider: replay.New([]replay.Entry{replay.ChunksEntry(chunks)}, replay.Options{})}
}

func TestRunEndsTheAnswerWithANewline(t *testing.T) {
	for _, text := range []string{"no newline at the end", "a newline at the end\n"} {
		// One writer for both, as a terminal shows them.
		both := newNotifyBuffer()
		err := runRun(testContext(t), []string{"--dir", t.TempDir(), "--workdir", t.TempDir(), "hi"}, both, both, textModel(text))
		require.NoError(t, err)
		out := both.String()
		require.True(t, strings.HasPrefix(out, strings.TrimSuffix(text, "\n")+"\nsession "), "%q", out)
		require.True(t, strings.HasSuffix(out, "\n"), "%q", out)
	}
}
