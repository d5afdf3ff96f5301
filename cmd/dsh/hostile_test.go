package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/fixtures"
	"github.com/dshgo/dsh/internal/testutil"
)

// cliArgsEnv makes the test binary run the dsh CLI on the JSON array of
// arguments it holds instead of the tests (see TestMain): how a test runs
// dsh as another user without building it.
const cliArgsEnv = "DSH_TEST_CLI_ARGS"

// hostileCommands are the dsh log commands every hostile input goes
// through; fork's --out is added per run (a fresh path).
var hostileCommands = [][]string{
	{"verify"}, {"show"}, {"messages"}, {"stats"}, {"stats", "--json"}, {"repair"}, {"fork", "--at", "0"}, {"replay"},
}

// hostileInput is one bad file and what each command must do with it.
type hostileInput struct {
	name string
	path string
	// want matches the one line every command prints on stderr (without
	// "dsh: PATH: " and the newline), except the commands in ok.
	want *regexp.Regexp
	// ok lists the commands for which the input is valid, with a check of
	// what they did.
	ok map[string]func(t *testing.T, path, stdout string)
	// maxAlloc, when set, bounds the bytes each command allocates: a
	// zstd bomb must not be decompressed into memory.
	maxAlloc uint64
}

// TestHostileInputs runs every dsh log command on hostile files: each
// refuses with exactly one line on stderr ("dsh: PATH: cause", no control
// characters), nothing on stdout, exit 1, no panic, the file unchanged and
// no fork output created; where an input is valid for a command (repair
// cuts a torn tail) the command succeeds and its result verifies.
func TestHostileInputs(t *testing.T) {
	dir := t.TempDir()
	in := buildHostileInputs(t, dir)
	for _, h := range in {
		t.Run(h.name, func(t *testing.T) {
			original := fingerprint(t, h.path)
			for _, cmd := range hostileCommands {
				name := strings.Join(cmd, " ")
				t.Run(name, func(t *testing.T) {
					path := h.path
					if h.ok[name] != nil {
						// The command changes the file: give it a copy.
						path = copyInput(t, h.path)
					}
					args := append([]string{"log"}, cmd...)
					out := ""
					if cmd[0] == "fork" {
						out = filepath.Join(t.TempDir(), "fork.jsonl")
						args = append(args, "--out", out)
					}
					var m0, m1 runtime.MemStats
					runtime.ReadMemStats(&m0)
					code, stdout, stderr := runDsh(append(args, path)...)
					runtime.ReadMemStats(&m1)
					if h.maxAlloc > 0 {
						require.Less(t, m1.TotalAlloc-m0.TotalAlloc, h.maxAlloc, "bytes allocated")
					}
					if check := h.ok[name]; check != nil {
						require.Equal(t, exitOK, code, stderr)
						require.Empty(t, stderr)
						check(t, path, stdout)
						return
					}
					requireOneErrorLine(t, h.want, path, code, stdout, stderr)
					require.Equal(t, original, fingerprint(t, path), "the file is unchanged")
					if out != "" {
						_, err := os.Lstat(out)
						require.ErrorIs(t, err, fs.ErrNotExist, "a failed fork creates no --out")
					}
				})
			}
		})
	}
}

// TestHostileUnreadableFile runs every log command, as an unprivileged
// user (uid/gid 65534, the tests run as root), on a file that user may not
// read in a directory it may traverse but not write: one "permission
// denied" line (naming the file, or for repair the writer lock it must
// take beside it), and nothing changed or created.
func TestHostileUnreadableFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs dsh as another user and needs root (as the tests run here)")
	}
	dir := sharedTempDir(t)
	bin := filepath.Join(dir, "dsh.test")
	self, err := os.Executable()
	require.NoError(t, err)
	copyFile(t, self, bin, 0o755)
	path := filepath.Join(dir, "secret.jsonl")
	copyFile(t, baseLog(t).plain, path, 0o600)
	outDir := filepath.Join(dir, "out")
	require.NoError(t, os.Mkdir(outDir, 0o755))
	require.NoError(t, os.Chown(outDir, 65534, 65534))
	before := fingerprint(t, path)
	want := regexp.MustCompile("^permission denied$")
	for _, cmd := range hostileCommands {
		t.Run(strings.Join(cmd, " "), func(t *testing.T) {
			args := append([]string{"log"}, cmd...)
			out := filepath.Join(outDir, "fork.jsonl")
			if cmd[0] == "fork" {
				args = append(args, "--out", out)
			}
			args = append(args, path)
			listing := fingerprint(t, dir)
			code, stdout, stderr := runAsNobody(t, bin, args)
			named := path
			if cmd[0] == "repair" && !strings.HasPrefix(stderr, "dsh: "+path+": ") {
				// Repair takes the session's writer lock beside the file
				// first, which this user may not create either.
				named = filepath.Join(dir, strings.TrimSuffix(strings.TrimPrefix(stderr, "dsh: "+dir+"/"), ": permission denied\n"))
				require.Equal(t, dir, filepath.Dir(named), "%q", stderr)
			}
			requireOneErrorLine(t, want, named, code, stdout, stderr)
			require.Equal(t, before, fingerprint(t, path))
			require.Equal(t, listing, fingerprint(t, dir), "nothing created beside the file")
			_, err := os.Lstat(out)
			require.ErrorIs(t, err, fs.ErrNotExist, "a failed fork creates no --out")
		})
	}
}

// requireOneErrorLine checks the shape of a refusal: exit 1, nothing on
// stdout, and exactly one line on stderr, "dsh: PATH: cause" with cause
// matching want, printable (no control characters) and valid UTF-8.
func requireOneErrorLine(t *testing.T, want *regexp.Regexp, path string, code int, stdout, stderr string) {
	t.Helper()
	require.Equal(t, exitFailure, code, "stderr: %q", stderr)
	require.Empty(t, stdout)
	require.True(t, strings.HasSuffix(stderr, "\n"), "%q", stderr)
	line := strings.TrimSuffix(stderr, "\n")
	require.NotContains(t, line, "\n", "one line")
	require.True(t, utf8.ValidString(line), "%q", line)
	for _, r := range line {
		require.False(t, r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0), "control character %U in %q", r, line)
	}
	path = visibleLine(path)
	prefix := "dsh: " + path + ": "
	require.True(t, strings.HasPrefix(line, prefix), "%q", line)
	cause := strings.TrimPrefix(line, prefix)
	require.NotContains(t, strings.TrimSuffix(cause, "; run 'dsh log repair "+path+"'"), path, "the path once (a repair hint may name it)")
	require.NotContains(t, cause, "session: ", "no package prefix inside the line")
	require.Regexp(t, want, cause)
}

// base is a valid two-turn log (the reference's multi-turn session), as
// plain JSONL, one event per line, and as JSONL+zstd in several frames.
type base struct {
	header        session.Header
	events        []session.Event
	plain, zstd   string
	lastFrameZstd int // offset of the zstd file's last frame
	zstdBatches   []int
}

func baseLog(t *testing.T) base {
	t.Helper()
	src := filepath.Join(mustCorpus(t), "acp", "multi-turn", "session.jsonl")
	f, err := session.ParseFile(fixtures.Substitute(mustReadRaw(t, src)), src)
	require.NoError(t, err)
	require.Nil(t, f.Torn)
	dir := t.TempDir()
	b := base{header: f.Header, events: f.Events, plain: filepath.Join(dir, "base.jsonl"), zstd: filepath.Join(dir, "base.jsonl.zstd")}
	require.NoError(t, session.WriteFile(b.plain, b.header, b.events, session.WriteOptions{}))
	const batch = 10
	for n := len(b.events); n > batch; n -= batch {
		b.zstdBatches = append(b.zstdBatches, batch)
	}
	require.NoError(t, session.WriteFile(b.zstd, b.header, b.events, session.WriteOptions{Zstd: true, BatchSizes: b.zstdBatches}))
	// The file holding all batches but the last is a prefix of the whole:
	// its length is where the last frame starts.
	prefix := filepath.Join(dir, "prefix.jsonl.zstd")
	n := len(b.zstdBatches) * batch
	require.NoError(t, session.WriteFile(prefix, b.header, b.events[:n], session.WriteOptions{Zstd: true, BatchSizes: b.zstdBatches}))
	whole, part := mustReadRaw(t, b.zstd), mustReadRaw(t, prefix)
	require.True(t, bytes.HasPrefix(whole, part))
	require.Less(t, len(part), len(whole))
	b.lastFrameZstd = len(part)
	return b
}

func buildHostileInputs(t *testing.T, dir string) []hostileInput {
	t.Helper()
	b := baseLog(t)
	plain, zst := mustReadRaw(t, b.plain), mustReadRaw(t, b.zstd)
	lines := strings.SplitAfter(string(plain), "\n")
	header := strings.TrimSuffix(lines[0], "\n")
	turnEnd := `{"type":"turn/end","seq":1,"time":0,"data":{"turn":1,"reason":{"kind":"completed"}}}` + "\n"
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o600))
		return p
	}
	exact := func(s string) *regexp.Regexp { return regexp.MustCompile("^" + regexp.QuoteMeta(s) + "$") }
	var in []hostileInput

	in = append(in, hostileInput{name: "empty file", path: write("empty.jsonl", nil),
		want: exact("log has no complete header line")})

	// Binary garbage that starts with a terminal escape sequence (an OSC
	// title) and holds newlines, NULs and invalid UTF-8.
	garbage := []byte("\x1b]0;pwned\x07\x00\xff\xfe\n")
	r := rand.New(rand.NewPCG(1, 2))
	for range 4096 {
		garbage = append(garbage, byte(r.UintN(256)))
	}
	in = append(in, hostileInput{name: "binary garbage", path: write("garbage.jsonl", garbage),
		want: exact(`not a session header: messages: not lossless JSON: invalid character '\x1b' at offset 0`)})

	// One byte flipped in the middle of a plain file: the first byte of
	// the middle line, '{' ^ 1 = 'z'. The line's record is one event
	// (seq = line number - 2) and a turn/end follows: corruption.
	mid := len(lines) / 2
	flipped := []byte(strings.Join(lines[:mid], ""))
	at := len(flipped)
	flipped = append(flipped, strings.Join(lines[mid:], "")...)
	require.Equal(t, byte('{'), flipped[at])
	flipped[at] ^= 1
	in = append(in, hostileInput{name: "byte flipped plain", path: write("flipped.jsonl", flipped),
		want: exact("line " + strconv.Itoa(mid+1) + " (seq " + strconv.Itoa(mid-1) +
			"): unparsable committed event: messages: not lossless JSON: invalid character 'z' at offset 0")})

	// One byte flipped in the middle of a zstd file: inside a frame that
	// later frames (and the last turn/end) follow, so not a torn tail.
	zflipped := bytes.Clone(zst)
	require.Less(t, len(zst)/2, b.lastFrameZstd)
	zflipped[len(zst)/2] ^= 0x55
	in = append(in, hostileInput{name: "byte flipped zstd", path: write("flipped.jsonl.zstd", zflipped),
		want: regexp.MustCompile(`^line \d+: zstd frame at offset \d+: [^:]`)})

	// A zstd file cut in the middle of its last frame: a torn tail, which
	// every reading command refuses with the repair hint, and repair cuts
	// (keeping the complete records of the torn frame) and closes the
	// open turn; the result verifies.
	cut := b.lastFrameZstd + (len(zst)-b.lastFrameZstd)/2
	truncated := write("truncated.jsonl.zstd", zst[:cut])
	in = append(in, hostileInput{name: "truncated zstd", path: truncated,
		want: regexp.MustCompile(`^torn tail at byte ` + strconv.Itoa(b.lastFrameZstd) + ` \(seq \d+\): torn final zstd frame(; run 'dsh log repair ` + regexp.QuoteMeta(truncated) + `')?$`),
		ok: map[string]func(*testing.T, string, string){
			"repair": func(t *testing.T, path, stdout string) {
				require.Regexp(t, `^`+regexp.QuoteMeta(path)+`: repaired: cut a torn tail of \d+ B at byte `+strconv.Itoa(b.lastFrameZstd)+
					` \(torn final zstd frame\).*; closed turn 2 as interrupted; now \d+ events, .*\n$`, stdout)
				f, err := session.ReadFile(path)
				require.NoError(t, err)
				require.Nil(t, f.Torn)
				require.Less(t, len(f.Events), len(b.events)+2)
				code, out, errOut := runDsh("log", "verify", path)
				require.Equal(t, exitOK, code, errOut)
				require.Contains(t, out, path+": ok: ")
				require.Contains(t, out, "2 turns")
			},
		}})

	// A 50 MB line in the committed region (a turn/end follows it).
	big := []byte(header + "\n" + `{"type":"user/message","seq":0,`)
	big = append(big, bytes.Repeat([]byte("x"), 50<<20)...)
	big = append(big, "}\n"+turnEnd...)
	in = append(in, hostileInput{name: "50 MB line", path: write("bigline.jsonl", big),
		want: regexp.MustCompile(`^line 2 \(seq 0\): [^:]+: .+`)})

	// JSON nested 100 000 deep as an event's data.
	deep := header + "\n" + `{"type":"user/message","seq":0,"time":0,"data":` + strings.Repeat("[", 100_000) +
		strings.Repeat("]", 100_000) + "}\n" + turnEnd
	in = append(in, hostileInput{name: "JSON nested 100k deep", path: write("deep.jsonl", []byte(deep)),
		want: regexp.MustCompile(`^line 2 \(seq 0\): unparsable committed event: .+`)})

	// Invalid UTF-8 inside a string of the first event.
	first := lines[1]
	q := strings.Index(first, `"text":"`) + len(`"text":"`)
	require.Greater(t, q, len(`"text":"`))
	badUTF8 := lines[0] + first[:q] + "\xff\xfe" + first[q:] + strings.Join(lines[2:], "")
	in = append(in, hostileInput{name: "invalid UTF-8 in a string", path: write("utf8.jsonl", []byte(badUTF8)),
		want: exact("line 2 (seq 0): unparsable committed event: messages: not lossless JSON: invalid UTF-8 in string at offset " + strconv.Itoa(q))})

	future := strings.Replace(string(plain), `"version":0`, `"version":99`, 1)
	in = append(in, hostileInput{name: "future format version", path: write("future.jsonl", []byte(future)),
		want: exact("log format version 99 was written by a newer harness — upgrade dsh (this build reads version 0)")})

	dup := strings.Replace(string(plain), `"version":0`, `"version":0,"version":0`, 1)
	in = append(in, hostileInput{name: "duplicate key in the header", path: write("dupkey.jsonl", []byte(dup)),
		want: exact(`not a session header: messages: not lossless JSON: duplicate key "version" at offset 30`)})

	sub := filepath.Join(dir, "a-directory.jsonl")
	require.NoError(t, os.Mkdir(sub, 0o755))
	in = append(in, hostileInput{name: "a directory", path: sub, want: exact("is a directory")})

	// zstd bombs: a valid header frame, then one frame of 10 MiB and of
	// 100 MiB of newlines (a few KiB on disk). The first empty line is a
	// record that does not parse, and no turn/end follows: a torn tail,
	// refused by every reading command at no more memory than a frame's
	// window, and cut by repair, leaving the header, which verifies.
	for _, mib := range []int{10, 100} {
		bomb := write("bomb-"+strconv.Itoa(mib)+"mib.jsonl.zstd", testutil.ZstdNewlineBomb([]byte(header), mib<<20))
		headerFrame := len(testutil.ZstdFrame(testutil.Repeat{Text: []byte(header + "\n"), N: 1}))
		in = append(in, hostileInput{name: strconv.Itoa(mib) + " MiB zstd bomb", path: bomb, maxAlloc: 48 << 20,
			want: regexp.MustCompile(`^torn tail at byte ` + strconv.Itoa(headerFrame) + ` \(seq 0\): [^;]+(; run 'dsh log repair ` +
				regexp.QuoteMeta(bomb) + `')?$`),
			ok: map[string]func(*testing.T, string, string){
				"repair": func(t *testing.T, path, stdout string) {
					require.Regexp(t, `^`+regexp.QuoteMeta(path)+`: repaired: cut a torn tail of [0-9.]+ K?i?B at byte `+
						strconv.Itoa(headerFrame)+` \([^;]+\); now 0 events, \d+ B\n$`, stdout)
					require.NotContains(t, stdout, "session: ")
					require.Len(t, mustReadRaw(t, path), headerFrame)
					code, out, errOut := runDsh("log", "verify", path)
					require.Equal(t, exitOK, code, errOut)
					require.Equal(t, path+": ok: 0 events, 0 turns, 0 derived messages\n", out)
				},
			}})
	}

	in = append(in, hostileInput{name: "missing file", path: filepath.Join(dir, "missing.jsonl"),
		want: exact("no such file or directory")})
	// A name that is a terminal escape sequence is printed visibly too.
	in = append(in, hostileInput{name: "missing file with an escape in its name", path: filepath.Join(dir, "\x1b[2Jmissing.jsonl"),
		want: exact("no such file or directory")})
	return in
}

// fingerprint is what a command must not change: the file's mode and a
// hash of its content, or of a directory's listing, or its absence.
func fingerprint(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "missing"
	}
	require.NoError(t, err)
	h := sha256.New()
	if fi.IsDir() {
		ents, err := os.ReadDir(path)
		require.NoError(t, err)
		for _, e := range ents {
			h.Write([]byte(e.Name() + "\n"))
		}
	} else {
		f, err := os.Open(path)
		require.NoError(t, err)
		defer f.Close()
		_, err = io.Copy(h, f)
		require.NoError(t, err)
	}
	return fi.Mode().String() + " " + strconv.FormatInt(fi.Size(), 10) + " " + string(h.Sum(nil))
}

func copyInput(t *testing.T, path string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(path))
	copyFile(t, path, dst, 0o600)
	return dst
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
	require.NoError(t, os.Chmod(dst, mode)) // past the umask
}

func mustReadRaw(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}

// sharedTempDir is a temporary directory every user may traverse and
// read (t.TempDir's are root's alone), removed after the test.
func sharedTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dsh-hostile-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	return dir
}

// runAsNobody runs the test binary bin as the dsh CLI with args, as
// uid/gid 65534.
func runAsNobody(t *testing.T, bin string, args []string) (code int, stdout, stderr string) {
	t.Helper()
	enc, err := json.Marshal(args)
	require.NoError(t, err)
	cmd := exec.Command(bin)
	cmd.Dir = filepath.Dir(bin)
	cmd.Env = []string{cliArgsEnv + "=" + string(enc), "PATH=/usr/bin:/bin", "HOME=" + filepath.Dir(bin)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String(), errOut.String()
	}
	require.NoError(t, err, "stderr: %s", errOut.String())
	return 0, out.String(), errOut.String()
}

// cliMain runs the dsh CLI when the test binary was started by
// runAsNobody, and reports whether it did.
func cliMain() (int, bool) {
	enc, ok := os.LookupEnv(cliArgsEnv)
	if !ok {
		return 0, false
	}
	var args []string
	if err := json.Unmarshal([]byte(enc), &args); err != nil {
		return exitUsage, true
	}
	return run(args, os.Stdout, os.Stderr), true
}
