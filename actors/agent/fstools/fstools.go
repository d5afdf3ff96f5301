package fstools

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// Limits of the tools' output.
const (
	defaultReadLines = 2000      // read_file's default limit
	maxReadBytes     = 256 << 10 // read_file stops after this many bytes
	maxLineBytes     = 2000      // longer lines are cut (read_file, grep)
	maxListEntries   = 1000      // list_dir
	maxGlobMatches   = 1000      // glob
	maxGrepMatches   = 200       // grep
	maxGrepFileBytes = 4 << 20   // grep skips larger files
)

// Error codes of the tools' error results (session.ToolError.Code; the
// name is "FileToolError").
const (
	CodeOutside    = "OUTSIDE_WORKDIR"
	CodeNotFound   = "NOT_FOUND"
	CodeBadInput   = "INVALID_INPUT"
	CodeNotAFile   = "NOT_A_FILE"
	CodeNotADir    = "NOT_A_DIRECTORY"
	CodeBinaryFile = "BINARY_FILE"
	CodeIO         = "IO_ERROR"
)

// Set is the file tools over one workdir. Its tools are safe for
// concurrent use.
type Set struct {
	dir   string // absolute, as given
	real  string // dir with symlinks resolved
	root  *os.Root
	tools []agent.Tool

	// Test seams, nil outside tests: visit is called with each entry a
	// walk visits, before the entry is handled; beforeOpen between
	// openFile's look and its open.
	visit      func(rel string)
	beforeOpen func(rel string)
}

// New opens the tools over workdir (which must be an existing directory).
func New(workdir string) (*Set, error) {
	abs, err := filepath.Abs(workdir)
	if err != nil {
		return nil, fmt.Errorf("fstools: %w", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("fstools: workdir: %w", err)
	}
	root, err := os.OpenRoot(real)
	if err != nil {
		return nil, fmt.Errorf("fstools: workdir: %w", err)
	}
	s := &Set{dir: abs, real: real, root: root}
	s.tools = []agent.Tool{readFile{s}, listDir{s}, globTool{s}, grepTool{s}}
	return s, nil
}

// Dir returns the workdir (absolute, symlinks resolved).
func (s *Set) Dir() string { return s.real }

// Tools returns read_file, list_dir, glob and grep.
func (s *Set) Tools() []agent.Tool { return append([]agent.Tool(nil), s.tools...) }

// Close releases the workdir handle; later calls fail with an error
// result.
func (s *Set) Close() error { return s.root.Close() }

// toolError is a failure reported to the model as an error result.
type toolError struct {
	code string
	msg  string
}

func (e *toolError) Error() string { return e.msg }

func errorf(code, format string, args ...any) *toolError {
	return &toolError{code: code, msg: fmt.Sprintf(format, args...)}
}

// result turns (text, err) into a tool result: a toolError (or any other
// error) is an IsError result with a typed code.
func result(text string, err error) (agent.Result, error) {
	if err == nil {
		return agent.Result{Content: []messages.ContentBlock{messages.TextBlock(text)}}, nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// The call was cancelled: the agent answers it as aborted.
		return agent.Result{}, err
	}
	var te *toolError
	if !errors.As(err, &te) {
		te = &toolError{code: CodeIO, msg: err.Error()}
	}
	return agent.Result{Content: []messages.ContentBlock{messages.TextBlock("Error: " + te.msg)}, IsError: true,
		Error: session.ToolError{Name: "FileToolError", Code: te.code}}, nil
}

// rel maps a path the model gave to a slash path relative to the workdir
// (fs.ValidPath), or refuses it.
func (s *Set) rel(p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", errorf(CodeBadInput, "path contains a NUL byte")
	}
	if p == "" {
		p = "."
	}
	orig := p
	if filepath.IsAbs(p) {
		p = filepath.Clean(p)
		r, ok := within(s.real, p)
		if !ok {
			r, ok = within(s.dir, p)
		}
		if !ok {
			return "", errorf(CodeOutside, "path %q is outside the workdir", orig)
		}
		p = r
	}
	p = filepath.ToSlash(filepath.Clean(p))
	if p == ".." || strings.HasPrefix(p, "../") || !fs.ValidPath(p) {
		return "", errorf(CodeOutside, "path %q is outside the workdir", orig)
	}
	return p, nil
}

// within returns p relative to dir when p is dir or below it.
func within(dir, p string) (string, bool) {
	r, err := filepath.Rel(dir, p)
	if err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return "", false
	}
	return r, true
}

// fsErr describes a filesystem error without the host's absolute paths.
func fsErr(orig string, err error) error {
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, syscall.ENXIO):
		// What open says of a socket (and of a device without a driver).
		return errorf(CodeNotAFile, "%q is not a regular file", orig)
	case errors.Is(err, fs.ErrNotExist):
		return errorf(CodeNotFound, "%q does not exist", orig)
	case strings.Contains(err.Error(), "escapes"):
		return errorf(CodeOutside, "path %q resolves outside the workdir", orig)
	case errors.Is(err, fs.ErrPermission):
		return errorf(CodeIO, "%q: permission denied", orig)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return errorf(CodeIO, "%q: %v", orig, pe.Err)
	}
	return errorf(CodeIO, "%q: %v", orig, err)
}

// openFile opens the regular file rel for reading, or refuses it. A look
// first (Stat, which follows symlinks inside the root as the open does)
// refuses a FIFO, socket or device without opening it at all, since
// opening some devices has effects; but the look can be stale by the time
// of the open, so the open is non-blocking (a FIFO with no writer would
// otherwise block it, beyond the reach of any context) and the descriptor
// is checked again with fstat, which cannot be raced, before any read.
// orig is the path as the model gave it, for messages. The caller closes
// the file.
func (s *Set) openFile(rel, orig string) (*os.File, fs.FileInfo, error) {
	if fi, err := s.root.Stat(rel); err == nil && !fi.Mode().IsRegular() {
		return nil, nil, notRegular(orig, fi)
	}
	if s.beforeOpen != nil {
		s.beforeOpen(rel)
	}
	f, err := s.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fsErr(orig, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, fsErr(orig, err)
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, nil, notRegular(orig, fi)
	}
	return f, fi, nil
}

// openDir opens the directory rel for listing, or refuses it, without
// blocking (O_DIRECTORY fails on anything else before a FIFO's open could
// wait for a writer). The caller closes the directory.
func (s *Set) openDir(rel, orig string) (*os.File, error) {
	f, err := s.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_DIRECTORY, 0)
	if errors.Is(err, syscall.ENOTDIR) {
		return nil, errorf(CodeNotADir, "%q is not a directory", orig)
	}
	if err != nil {
		return nil, fsErr(orig, err)
	}
	return f, nil
}

func notRegular(orig string, fi fs.FileInfo) error {
	if fi.IsDir() {
		return errorf(CodeNotAFile, "%q is not a regular file", orig)
	}
	kind := "special file"
	switch m := fi.Mode(); {
	case m&fs.ModeNamedPipe != 0:
		kind = "named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		kind = "socket"
	case m&fs.ModeDevice != 0:
		kind = "device"
	}
	return errorf(CodeNotAFile, "%q is a %s, not a regular file", orig, kind)
}

// readDir returns the entries of the open directory d in name order,
// reading it in batches and checking ctx between them. With keep > 0 it
// keeps only the first keep names (in order) and reports how many more
// there were, so a huge directory costs bounded memory.
func readDir(ctx context.Context, d *os.File, keep int) (ents []fs.DirEntry, more int, err error) {
	const batch = 256
	for {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		got, err := d.ReadDir(batch)
		ents = append(ents, got...)
		if keep > 0 && len(ents) > 2*keep {
			ents, more = trimDir(ents, keep, more)
		}
		if err == io.EOF || (err == nil && len(got) == 0) {
			break
		}
		if err != nil {
			return nil, 0, err
		}
	}
	if keep > 0 && len(ents) > keep {
		ents, more = trimDir(ents, keep, more)
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, more, nil
}

// trimDir keeps the keep first entries by name, adding the rest to more.
func trimDir(ents []fs.DirEntry, keep, more int) ([]fs.DirEntry, int) {
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return slices.Clip(ents[:keep]), more + len(ents) - keep
}

// nextLine reads one line from br (with its newline, if any), keeping at
// most keep bytes of it: the rest is read and dropped, a chunk at a time
// with ctx checked between chunks, so a file without newlines costs
// bounded memory and can be cancelled. nul reports a NUL byte anywhere in
// the line. At the end of the input it returns io.EOF with an empty line.
func nextLine(ctx context.Context, br *bufio.Reader, keep int) (line []byte, nul bool, err error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		chunk, err := br.ReadSlice('\n')
		nul = nul || bytes.IndexByte(chunk, 0) >= 0
		if room := keep - len(line); room > 0 {
			line = append(line, chunk[:min(room, len(chunk))]...)
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && len(line) > 0:
			return line, nul, nil
		default:
			return line, nul, err
		}
	}
}

// Input helpers.

func strArg(in messages.JSON, key string, required bool) (string, error) {
	v, ok := in.Field(key)
	if !ok || v.Kind() == messages.KindNull {
		if required {
			return "", errorf(CodeBadInput, "missing %q", key)
		}
		return "", nil
	}
	s, ok := v.AsString()
	if !ok {
		return "", errorf(CodeBadInput, "%q must be a string", key)
	}
	return s, nil
}

func intArg(in messages.JSON, key string, def int64) (int64, error) {
	v, ok := in.Field(key)
	if !ok || v.Kind() == messages.KindNull {
		return def, nil
	}
	n, ok := v.AsInt()
	if !ok {
		return 0, errorf(CodeBadInput, "%q must be an integer", key)
	}
	return n, nil
}

func checkInput(in messages.JSON) error {
	if in.Kind() != messages.KindObject {
		return errorf(CodeBadInput, "arguments must be a JSON object")
	}
	return nil
}

func schema(name, desc, params string) messages.ToolSchema {
	return messages.ToolSchema{Name: name, Description: desc, Parameters: messages.MustParseJSON(params)}
}

func cut(line string) string {
	if len(line) > maxLineBytes {
		return line[:maxLineBytes] + "…"
	}
	return line
}

// read_file

type readFile struct{ s *Set }

func (readFile) Name() string { return "read_file" }

func (readFile) Schema() messages.ToolSchema {
	return schema("read_file", "Read a text file in the working directory. Lines are numbered from 1; "+
		"offset is the first line to read, limit the number of lines (default 2000).",
		`{"type":"object","properties":{"path":{"type":"string","description":"file path, relative to the working directory"},`+
			`"offset":{"type":"integer","minimum":1},"limit":{"type":"integer","minimum":1}},"required":["path"]}`)
}

func (readFile) Mode(messages.JSON) agent.Mode { return agent.Parallel }

func (t readFile) Execute(ctx context.Context, call agent.Call) (agent.Result, error) {
	return result(t.run(ctx, call.Input))
}

func (t readFile) run(ctx context.Context, in messages.JSON) (string, error) {
	if err := checkInput(in); err != nil {
		return "", err
	}
	p, err := strArg(in, "path", true)
	if err != nil {
		return "", err
	}
	offset, err := intArg(in, "offset", 1)
	if err != nil {
		return "", err
	}
	limit, err := intArg(in, "limit", defaultReadLines)
	if err != nil {
		return "", err
	}
	if offset < 1 || limit < 1 {
		return "", errorf(CodeBadInput, "offset and limit must be at least 1")
	}
	rel, err := t.s.rel(p)
	if err != nil {
		return "", err
	}
	f, _, err := t.s.openFile(rel, p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var b strings.Builder
	var n, shown, bytesOut int64
	more := false
	for {
		// Keep room for a cut line's "\r\n", so cut still sees it is long.
		line, nul, err := nextLine(ctx, br, maxLineBytes+2)
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fsErr(p, err)
		}
		n++
		if nul {
			return "", errorf(CodeBinaryFile, "%q looks like a binary file", p)
		}
		if n < offset {
			continue
		}
		if shown == limit || bytesOut >= maxReadBytes {
			more = true
			break
		}
		out := fmt.Sprintf("%6d\t%s\n", n, cut(strings.TrimRight(string(line), "\r\n")))
		b.WriteString(out)
		shown++
		bytesOut += int64(len(out))
	}
	switch {
	case n == 0:
		return fmt.Sprintf("(%s is empty)", p), nil
	case shown == 0:
		return "", errorf(CodeBadInput, "offset %d is past the end of %q (%d lines)", offset, p, n)
	case more:
		fmt.Fprintf(&b, "(more lines follow: read on with offset %d)\n", offset+shown)
	}
	return b.String(), nil
}

// list_dir

type listDir struct{ s *Set }

func (listDir) Name() string { return "list_dir" }

func (listDir) Schema() messages.ToolSchema {
	return schema("list_dir", "List a directory in the working directory (default: the working directory itself). "+
		"Directories end in /.",
		`{"type":"object","properties":{"path":{"type":"string","description":"directory path, relative to the working directory"}}}`)
}

func (listDir) Mode(messages.JSON) agent.Mode { return agent.Parallel }

func (t listDir) Execute(ctx context.Context, call agent.Call) (agent.Result, error) {
	return result(t.run(ctx, call.Input))
}

func (t listDir) run(ctx context.Context, in messages.JSON) (string, error) {
	if err := checkInput(in); err != nil {
		return "", err
	}
	p, err := strArg(in, "path", false)
	if err != nil {
		return "", err
	}
	rel, err := t.s.rel(p)
	if err != nil {
		return "", err
	}
	d, err := t.s.openDir(rel, p)
	if err != nil {
		return "", err
	}
	defer d.Close()
	ents, more, err := readDir(ctx, d, maxListEntries)
	if err != nil {
		return "", fsErr(p, err)
	}
	if len(ents) == 0 {
		return "(empty directory)", nil
	}
	var b strings.Builder
	for _, e := range ents {
		name := e.Name()
		switch {
		case e.IsDir():
			name += "/"
		case e.Type()&fs.ModeSymlink != 0:
			name += "@"
		}
		b.WriteString(name + "\n")
	}
	if more > 0 {
		fmt.Fprintf(&b, "(%d more entries)\n", more)
	}
	return b.String(), nil
}

// glob

type globTool struct{ s *Set }

func (globTool) Name() string { return "glob" }

func (globTool) Schema() messages.ToolSchema {
	return schema("glob", "Find files in the working directory whose path matches a pattern: * ? [..] match "+
		"within a path segment, ** matches any number of segments (e.g. **/*.go). The pattern is matched "+
		"against paths relative to path (default: the working directory); the paths printed are relative to "+
		"the working directory.",
		`{"type":"object","properties":{"pattern":{"type":"string"},"path":{"type":"string"}},"required":["pattern"]}`)
}

func (globTool) Mode(messages.JSON) agent.Mode { return agent.Parallel }

func (t globTool) Execute(ctx context.Context, call agent.Call) (agent.Result, error) {
	return result(t.run(ctx, call.Input))
}

func (t globTool) run(ctx context.Context, in messages.JSON) (string, error) {
	if err := checkInput(in); err != nil {
		return "", err
	}
	pat, err := strArg(in, "pattern", true)
	if err != nil {
		return "", err
	}
	if _, err := path.Match(strings.ReplaceAll(pat, "**", "*"), ""); err != nil {
		return "", errorf(CodeBadInput, "bad pattern %q: %v", pat, err)
	}
	p, err := strArg(in, "path", false)
	if err != nil {
		return "", err
	}
	base, err := t.s.rel(p)
	if err != nil {
		return "", err
	}
	segs := strings.Split(strings.Trim(pat, "/"), "/")
	var out []string
	more := false
	err = t.s.walk(ctx, base, func(full, rel string, d fs.DirEntry) error {
		if d.IsDir() {
			return nil
		}
		if matchSegs(segs, strings.Split(rel, "/")) {
			if len(out) == maxGlobMatches {
				more = true
				return fs.SkipAll
			}
			out = append(out, full)
		}
		return nil
	})
	if err != nil {
		return "", fsErr(p, err)
	}
	if len(out) == 0 {
		return "(no matches)", nil
	}
	s := strings.Join(out, "\n") + "\n"
	if more {
		s += fmt.Sprintf("(stopped after %d matches)\n", maxGlobMatches)
	}
	return s, nil
}

// walk visits the entries under base in name order (not following
// symlinked directories), passing each one's path relative to the workdir
// and to base; base itself is visited only when it is not a directory. fn
// may return fs.SkipAll to end the walk early. Directories are opened like
// list_dir's (non-blocking, checked) one at a time, and ctx is checked
// before each entry; unreadable directories below base are skipped.
func (s *Set) walk(ctx context.Context, base string, fn func(full, rel string, d fs.DirEntry) error) error {
	fi, err := s.root.Stat(base)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		err = s.walkDir(ctx, base, "", fn)
	} else {
		err = s.visitEntry(ctx, base, path.Base(base), fs.FileInfoToDirEntry(fi), fn)
	}
	if errors.Is(err, fs.SkipAll) {
		return nil
	}
	return err
}

// walkDir walks the directory dir (relDir relative to the walk's base).
func (s *Set) walkDir(ctx context.Context, dir, relDir string, fn func(full, rel string, d fs.DirEntry) error) error {
	d, err := s.root.OpenFile(dir, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_DIRECTORY, 0)
	if err != nil {
		if relDir == "" {
			return err
		}
		return nil // an unreadable (or swapped) directory is skipped
	}
	ents, _, err := readDir(ctx, d, 0)
	_ = d.Close()
	if err != nil {
		if relDir == "" || ctx.Err() != nil {
			return err
		}
		return nil
	}
	for _, e := range ents {
		full := path.Join(dir, e.Name())
		rel := e.Name()
		if relDir != "" {
			rel = relDir + "/" + rel
		}
		if err := s.visitEntry(ctx, full, rel, e, fn); err != nil {
			return err
		}
		if e.IsDir() {
			if err := s.walkDir(ctx, full, rel, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Set) visitEntry(ctx context.Context, full, rel string, e fs.DirEntry, fn func(full, rel string, d fs.DirEntry) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.visit != nil {
		s.visit(full)
	}
	return fn(full, rel, e)
}

// matchSegs matches path segments against pattern segments, where "**"
// matches zero or more segments.
func matchSegs(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if matchSegs(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// grep

type grepTool struct{ s *Set }

func (grepTool) Name() string { return "grep" }

func (grepTool) Schema() messages.ToolSchema {
	return schema("grep", "Search text files in the working directory for a regular expression (RE2 syntax). "+
		"Prints path:line:text. path is a file or a directory (default: the working directory); include "+
		"filters file paths with a glob pattern (as in the glob tool).",
		`{"type":"object","properties":{"pattern":{"type":"string"},"path":{"type":"string"},"include":{"type":"string"}},`+
			`"required":["pattern"]}`)
}

func (grepTool) Mode(messages.JSON) agent.Mode { return agent.Parallel }

func (t grepTool) Execute(ctx context.Context, call agent.Call) (agent.Result, error) {
	return result(t.run(ctx, call.Input))
}

func (t grepTool) run(ctx context.Context, in messages.JSON) (string, error) {
	if err := checkInput(in); err != nil {
		return "", err
	}
	pat, err := strArg(in, "pattern", true)
	if err != nil {
		return "", err
	}
	re, err := regexp.Compile(pat)
	if err != nil {
		return "", errorf(CodeBadInput, "bad pattern: %v", err)
	}
	include, err := strArg(in, "include", false)
	if err != nil {
		return "", err
	}
	var incl []string
	if include != "" {
		if _, err := path.Match(strings.ReplaceAll(include, "**", "*"), ""); err != nil {
			return "", errorf(CodeBadInput, "bad include pattern %q: %v", include, err)
		}
		incl = strings.Split(strings.Trim(include, "/"), "/")
	}
	p, err := strArg(in, "path", false)
	if err != nil {
		return "", err
	}
	base, err := t.s.rel(p)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	count := 0
	more := false
	err = t.s.walk(ctx, base, func(full, rel string, d fs.DirEntry) error {
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		if incl != nil && !matchSegs(incl, strings.Split(rel, "/")) && !matchSegs(incl, []string{path.Base(rel)}) {
			return nil
		}
		data, err := t.readSmall(full)
		if err != nil || bytes.IndexByte(data, 0) >= 0 {
			return nil // unreadable, too large, binary or not a regular file: skipped
		}
		for i, line := range strings.Split(string(data), "\n") {
			if i%256 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			if re.MatchString(line) {
				if count == maxGrepMatches {
					more = true
					return fs.SkipAll
				}
				fmt.Fprintf(&b, "%s:%d:%s\n", full, i+1, cut(strings.TrimRight(line, "\r")))
				count++
			}
		}
		return nil
	})
	if err != nil {
		return "", fsErr(p, err)
	}
	if count == 0 {
		return "(no matches)", nil
	}
	if more {
		fmt.Fprintf(&b, "(stopped after %d matches)\n", maxGrepMatches)
	}
	return b.String(), nil
}

// readSmall reads the regular file rel whole, or fails (a special file
// is never opened in a way that can block; a file over maxGrepFileBytes
// is not read).
func (t grepTool) readSmall(rel string) ([]byte, error) {
	f, fi, err := t.s.openFile(rel, rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > maxGrepFileBytes {
		return nil, errors.New("skipped")
	}
	return io.ReadAll(io.LimitReader(f, maxGrepFileBytes))
}
