package lint

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestLint runs every rule over every Go file of the module. See doc.go for
// the rules and what is skipped.
func TestLint(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := goFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no .go files found under %s", root)
	}

	fset := token.NewFileSet()
	var found []violation
	for _, rel := range files {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			t.Error(err)
			continue
		}
		fi, err := parseFile(fset, rel, src)
		if err != nil {
			// A file that does not parse cannot be checked; go vet will
			// give the details, here we only make sure it is not skipped
			// silently.
			t.Errorf("%s: parse: %v", rel, err)
			continue
		}
		found = append(found, check(fi)...)
	}
	for _, v := range found {
		t.Error(v)
	}
	t.Logf("checked %d files", len(files))
}

// moduleRoot returns the nearest directory at or above the working directory
// that holds a go.mod. go test runs a test in its package directory, so this
// is the root of the module under test.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("lint: no go.mod found above the working directory")
		}
		dir = parent
	}
}

// goFiles lists the .go files of the module rooted at root, as slash-separated
// paths relative to root, in lexical order. It skips what the go tool skips
// (vendor, testdata, names starting with "." or "_") and nested modules.
func goFiles(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p == root {
				return nil
			}
			if name == "vendor" || name == "testdata" ||
				strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(name, ".go") ||
			strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	return files, err
}

// violation is one finding, printed as file:line: message.
type violation struct {
	pos token.Position
	msg string
}

func (v violation) String() string {
	return fmt.Sprintf("%s:%d: %s", v.pos.Filename, v.pos.Line, v.msg)
}

// fileInfo is a parsed file plus what the rules need to know about it.
type fileInfo struct {
	fset *token.FileSet
	path string // slash-separated, relative to the module root
	file *ast.File
	src  []byte // the file's text, for the rules that read it as text

	// imports maps each local package name in the file to its import path:
	// the explicit name when there is one, else the last path element
	// (which is the package name for every standard package we look for).
	imports map[string]string
	// dotImports holds the import paths imported with `import . "path"`.
	dotImports map[string]bool
}

// parseFile parses src as the file at rel (slash-separated, relative to the
// module root). The fileInfo keeps src; the caller must not modify it.
func parseFile(fset *token.FileSet, rel string, src []byte) (*fileInfo, error) {
	f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution|parser.ParseComments)
	if err != nil {
		return nil, err
	}
	fi := &fileInfo{
		fset:       fset,
		path:       rel,
		file:       f,
		src:        src,
		imports:    make(map[string]string),
		dotImports: make(map[string]bool),
	}
	for _, spec := range f.Imports {
		p, err := strconv.Unquote(spec.Path.Value)
		if err != nil {
			return nil, fmt.Errorf("bad import path %s: %w", spec.Path.Value, err)
		}
		name := path.Base(p)
		if spec.Name != nil {
			name = spec.Name.Name
		}
		switch name {
		case "_":
		case ".":
			fi.dotImports[p] = true
		default:
			fi.imports[name] = p
		}
	}
	return fi, nil
}

func (fi *fileInfo) isTest() bool { return strings.HasSuffix(fi.path, "_test.go") }

// under reports whether the file sits in the top-level directory dir or below.
func (fi *fileInfo) under(dir string) bool { return strings.HasPrefix(fi.path, dir+"/") }

func (fi *fileInfo) violation(n ast.Node, format string, args ...any) violation {
	return violation{pos: fi.fset.Position(n.Pos()), msg: fmt.Sprintf(format, args...)}
}

// calledFunc returns the import path and name of the package-level function
// that call invokes, as in pkg.Name(...) or, with a dot import, Name(...).
// ok is false when the callee is not a function of an imported package.
func (fi *fileInfo) calledFunc(call *ast.CallExpr) (pkgPath, name string, ok bool) {
	switch fun := ast.Unparen(call.Fun).(type) {
	case *ast.SelectorExpr:
		id, isIdent := fun.X.(*ast.Ident)
		if !isIdent {
			return "", "", false
		}
		p, imported := fi.imports[id.Name]
		if !imported {
			return "", "", false
		}
		return p, fun.Sel.Name, true
	case *ast.Ident:
		// Only the packages the rules look for matter; each of their
		// function names is unique among them, so the first dot import
		// that exports the name is the one.
		for _, p := range []string{"fmt", "log", "os", "time"} {
			if fi.dotImports[p] && slices.Contains(ruledFuncs[p], fun.Name) {
				return p, fun.Name, true
			}
		}
	}
	return "", "", false
}

// ruledFuncs lists, per import path, the functions some rule forbids. It is
// used only to resolve calls through dot imports.
var ruledFuncs = map[string][]string{
	"fmt":  {"Print", "Println", "Printf"},
	"log":  {"Fatal", "Fatalf", "Fatalln"},
	"os":   {"Exit"},
	"time": {"Sleep"},
}

// forEachCall calls fn for every call expression in the file, with the name of
// the enclosing top-level function ("" for package-level initialisers and for
// methods, which cannot be TestMain).
func (fi *fileInfo) forEachCall(fn func(call *ast.CallExpr, enclosing string)) {
	for _, decl := range fi.file.Decls {
		enclosing := ""
		if fd, ok := decl.(*ast.FuncDecl); ok && fd.Recv == nil {
			enclosing = fd.Name.Name
		}
		ast.Inspect(decl, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				fn(call, enclosing)
			}
			return true
		})
	}
}

// rules are run on every file; each decides for itself whether the file is in
// its scope.
var rules = []func(*fileInfo) []violation{
	noSleepInTests,
	noExitOutsideCmd,
	noPrintOutsideCmd,
	noAnyInMessages,
	noOutsideCitations,
}

// check runs every rule on fi.
func check(fi *fileInfo) []violation {
	var out []violation
	for _, rule := range rules {
		out = append(out, rule(fi)...)
	}
	return out
}

// noSleepInTests forbids time.Sleep in test files: sleeping makes tests slow
// and flaky. Use testing/synctest, or poll with a deadline.
func noSleepInTests(fi *fileInfo) []violation {
	if !fi.isTest() {
		return nil
	}
	var out []violation
	fi.forEachCall(func(call *ast.CallExpr, _ string) {
		if p, name, ok := fi.calledFunc(call); ok && p == "time" && name == "Sleep" {
			out = append(out, fi.violation(call, "time.Sleep in a test; use testing/synctest or poll with a deadline"))
		}
	})
	return out
}

// noExitOutsideCmd forbids log.Fatal* and os.Exit outside cmd/: only a binary
// decides to end the process; a library returns an error. A test's TestMain
// must end with os.Exit(m.Run()), so os.Exit is allowed there.
func noExitOutsideCmd(fi *fileInfo) []violation {
	if fi.under("cmd") {
		return nil
	}
	var out []violation
	fi.forEachCall(func(call *ast.CallExpr, enclosing string) {
		p, name, ok := fi.calledFunc(call)
		switch {
		case !ok:
		case p == "log" && slices.Contains(ruledFuncs["log"], name):
			out = append(out, fi.violation(call, "log.%s outside cmd/; return an error instead", name))
		case p == "os" && name == "Exit" && enclosing != "TestMain":
			out = append(out, fi.violation(call, "os.Exit outside cmd/ (allowed only in TestMain); return an error instead"))
		}
	})
	return out
}

// noPrintOutsideCmd forbids fmt.Print, fmt.Println and fmt.Printf outside
// cmd/: libraries do not own stdout, and tests report through t.Log so that
// output is attributed to the test and shown only on failure or -v. The
// one exception is a testable example (a func Example... in a _test.go
// file), whose printed output is what `go test` checks.
func noPrintOutsideCmd(fi *fileInfo) []violation {
	if fi.under("cmd") {
		return nil
	}
	var out []violation
	fi.forEachCall(func(call *ast.CallExpr, enclosing string) {
		if fi.isTest() && strings.HasPrefix(enclosing, "Example") {
			return
		}
		if p, name, ok := fi.calledFunc(call); ok && p == "fmt" && slices.Contains(ruledFuncs["fmt"], name) {
			out = append(out, fi.violation(call, "fmt.%s outside cmd/; tests use t.Log, libraries return values or log", name))
		}
	})
	return out
}

// noAnyInMessages forbids any and interface{} in the exported surface of
// messages/: message values are frozen and fully typed, and a dynamically
// typed field or parameter would let mutable data, or data the encoder does
// not know, cross an actor boundary. Test files are exempt.
func noAnyInMessages(fi *fileInfo) []violation {
	if !fi.under("messages") || fi.isTest() {
		return nil
	}
	c := anyChecker{fi: fi}
	for _, decl := range fi.file.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			name := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) == 1 {
				name = recvTypeName(d.Recv.List[0].Type) + "." + name
			}
			// d.Type.TypeParams is deliberately not checked; see doc.go.
			c.fields(name, d.Type.Params)
			c.fields(name, d.Type.Results)
		case *ast.GenDecl:
			if d.Tok != token.TYPE {
				continue
			}
			for _, spec := range d.Specs {
				ts := spec.(*ast.TypeSpec)
				c.expr(ts.Name.Name, ts.Type)
			}
		}
	}
	return c.out
}

// anyChecker walks type expressions in messages/ and records each any or
// interface{} reachable through exported names.
type anyChecker struct {
	fi  *fileInfo
	out []violation
}

func (c *anyChecker) report(n ast.Node, ctx, what string) {
	c.out = append(c.out, c.fi.violation(n, "exported %s uses %s in messages/; use a concrete type", ctx, what))
}

func (c *anyChecker) fields(ctx string, fl *ast.FieldList) {
	if fl == nil {
		return
	}
	for _, f := range fl.List {
		c.expr(ctx, f.Type)
	}
}

// expr walks the type expression e. Struct fields and interface methods are
// followed only when exported: an unexported field is not reachable from other
// packages, and its own exported fields, if it is a struct, are walked as
// part of the literal that declares them.
func (c *anyChecker) expr(ctx string, e ast.Expr) {
	switch e := e.(type) {
	case nil:
	case *ast.Ident:
		if e.Name == "any" {
			c.report(e, ctx, "any")
		}
	case *ast.InterfaceType:
		if e.Methods == nil || len(e.Methods.List) == 0 {
			c.report(e, ctx, "interface{}")
			return
		}
		for _, f := range e.Methods.List {
			if len(f.Names) == 0 {
				c.expr(ctx, f.Type) // embedded interface or type-set term
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					c.expr(ctx+"."+n.Name, f.Type)
				}
			}
		}
	case *ast.StructType:
		for _, f := range e.Fields.List {
			if len(f.Names) == 0 {
				if name := embeddedName(f.Type); ast.IsExported(name) {
					c.expr(ctx+"."+name, f.Type)
				}
				continue
			}
			var exported []string
			for _, n := range f.Names {
				if n.IsExported() {
					exported = append(exported, n.Name)
				}
			}
			if len(exported) > 0 {
				c.expr(ctx+"."+strings.Join(exported, ","), f.Type)
			}
		}
	case *ast.FuncType:
		c.fields(ctx, e.Params)
		c.fields(ctx, e.Results)
	case *ast.ArrayType:
		c.expr(ctx, e.Elt)
	case *ast.MapType:
		c.expr(ctx, e.Key)
		c.expr(ctx, e.Value)
	case *ast.ChanType:
		c.expr(ctx, e.Value)
	case *ast.StarExpr:
		c.expr(ctx, e.X)
	case *ast.Ellipsis:
		c.expr(ctx, e.Elt)
	case *ast.ParenExpr:
		c.expr(ctx, e.X)
	case *ast.IndexExpr:
		c.expr(ctx, e.X)
		c.expr(ctx, e.Index)
	case *ast.IndexListExpr:
		c.expr(ctx, e.X)
		for _, ix := range e.Indices {
			c.expr(ctx, ix)
		}
	case *ast.BinaryExpr: // type-set union A | B
		c.expr(ctx, e.X)
		c.expr(ctx, e.Y)
	case *ast.UnaryExpr: // ~T
		c.expr(ctx, e.X)
	case *ast.SelectorExpr:
		// pkg.T names a type of another package; what it contains is that
		// package's business.
	}
}

// embeddedName returns the field name of an embedded field of type e: the
// type's name without pointer, package qualifier or type arguments.
func embeddedName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.SelectorExpr:
			return x.Sel.Name
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// recvTypeName returns the name of a method receiver's base type.
func recvTypeName(e ast.Expr) string {
	if name := embeddedName(e); name != "" {
		return name
	}
	return "?"
}

// TestRules proves each rule fires on a small in-memory snippet, and stays
// silent where it should, before TestLint trusts it to be silent on the tree.
func TestRules(t *testing.T) {
	tests := []struct {
		name string
		path string
		src  string
		want []string // violations as file:line: message prefix
	}{
		{
			name: "sleep in test",
			path: "actors/inbox/inbox_test.go",
			src: `package inbox
import "time"
func TestX() {
	time.Sleep(time.Millisecond)
}`,
			want: []string{"actors/inbox/inbox_test.go:4: time.Sleep in a test"},
		},
		{
			name: "sleep through alias and dot import",
			path: "x_test.go",
			src: `package x
import (
	tm "time"
	. "time"
)
func TestX() {
	defer tm.Sleep(1)
	go Sleep(2)
	_ = func() { (tm.Sleep)(3) }
}`,
			want: []string{
				"x_test.go:7: time.Sleep in a test",
				"x_test.go:8: time.Sleep in a test",
				"x_test.go:9: time.Sleep in a test",
			},
		},
		{
			name: "sleep outside tests and look-alikes are fine",
			path: "actors/inbox/inbox.go",
			src: `package inbox
import "time"
func wait() { time.Sleep(1) }`,
		},
		{
			name: "sleep from another package called time is fine",
			path: "x_test.go",
			src: `package x
import time "example.com/fakeclock"
func TestX() { time.Sleep(1) }`,
		},
		{
			name: "log.Fatal and os.Exit outside cmd",
			path: "supervisor/supervisor.go",
			src: `package supervisor
import (
	stdlog "log"
	"os"
)
func run() {
	stdlog.Fatalf("boom %d", 1)
	stdlog.Fatalln("boom")
	os.Exit(2)
	stdlog.Printf("fine")
}`,
			want: []string{
				"supervisor/supervisor.go:7: log.Fatalf outside cmd/",
				"supervisor/supervisor.go:8: log.Fatalln outside cmd/",
				"supervisor/supervisor.go:9: os.Exit outside cmd/",
			},
		},
		{
			name: "os.Exit in TestMain is fine, log.Fatal there is not",
			path: "actors/session/main_test.go",
			src: `package session
import (
	"log"
	"os"
	"testing"
)
func TestMain(m *testing.M) {
	if false {
		log.Fatal("no")
	}
	func() { os.Exit(m.Run()) }()
}
func TestOther(t *testing.T) { os.Exit(1) }`,
			want: []string{
				"actors/session/main_test.go:9: log.Fatal outside cmd/",
				"actors/session/main_test.go:13: os.Exit outside cmd/",
			},
		},
		{
			name: "a method named TestMain gets no exemption",
			path: "x_test.go",
			src: `package x
import "os"
type s struct{}
func (s) TestMain() { os.Exit(1) }`,
			want: []string{"x_test.go:4: os.Exit outside cmd/"},
		},
		{
			name: "cmd may exit and print",
			path: "cmd/dsh/main.go",
			src: `package main
import (
	"fmt"
	"log"
	"os"
)
func main() {
	fmt.Println("hi")
	log.Fatal("x")
	os.Exit(1)
}`,
		},
		{
			name: "a top-level dir that merely starts with cmd is not cmd/",
			path: "cmdline/x.go",
			src: `package cmdline
import "os"
func f() { os.Exit(1) }`,
			want: []string{"cmdline/x.go:3: os.Exit outside cmd/"},
		},
		{
			name: "fmt printing outside cmd, tests included",
			path: "bench/bench_test.go",
			src: `package bench
import (
	f "fmt"
	. "fmt"
)
var _, _ = f.Println("init")
func TestX() {
	f.Print("a")
	Printf("%d", 1)
	_ = f.Sprintf("fine")
	f.Fprintln(nil, "fine")
}
func ExampleX() { f.Println("an example prints its output") }`,
			want: []string{
				"bench/bench_test.go:6: fmt.Println outside cmd/",
				"bench/bench_test.go:8: fmt.Print outside cmd/",
				"bench/bench_test.go:9: fmt.Printf outside cmd/",
			},
		},
		{
			name: "any in the exported surface of messages",
			path: "messages/event.go",
			src: `package messages
type Event struct {
	Payload any
	Meta    map[string]interface{}
	Opts    []func(any) error
	hidden  any
	Nested  struct {
		Inner any
		inner interface{}
	}
	Iface interface {
		Get() any
		set(any)
		fmt.Stringer
	}
}
type Payload interface{}
type ok interface{ M() }
type Box[T any] struct{ V T }
func New(p any) Event { return Event{} }
func Decode(b []byte) (interface{}, error) { return nil, nil }
func (e Event) With(kv ...any) Event { return e }
func (e *Event) Map() map[string]any { return nil }
func Clone[T any](v T) T { return v }
func internal(p any) {}
func (e Event) private(p any) {}
`,
			want: []string{
				"messages/event.go:3: exported Event.Payload uses any",
				"messages/event.go:4: exported Event.Meta uses interface{}",
				"messages/event.go:5: exported Event.Opts uses any",
				"messages/event.go:8: exported Event.Nested.Inner uses any",
				"messages/event.go:12: exported Event.Iface.Get uses any",
				"messages/event.go:17: exported Payload uses interface{}",
				"messages/event.go:20: exported New uses any",
				"messages/event.go:21: exported Decode uses interface{}",
				"messages/event.go:22: exported Event.With uses any",
				"messages/event.go:23: exported Event.Map uses any",
			},
		},
		{
			name: "messages test files and other packages may use any",
			path: "messages/event_test.go",
			src: `package messages
func Helper(v any) {}
type T struct{ V any }`,
		},
		{
			name: "any outside messages is fine",
			path: "actors/llm/llm.go",
			src: `package llm
func Call(v any) any { return v }`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fi, err := parseFile(token.NewFileSet(), tt.path, []byte(tt.src))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range check(fi) {
				got = append(got, v.String())
			}
			slices.Sort(got)
			want := slices.Clone(tt.want)
			slices.Sort(want)
			if len(got) != len(want) {
				t.Fatalf("got %d violations, want %d:\ngot:\n\t%s\nwant:\n\t%s",
					len(got), len(want), strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
			}
			for i := range got {
				if !strings.HasPrefix(got[i], want[i]) {
					t.Errorf("violation %d:\ngot  %s\nwant %s...", i, got[i], want[i])
				}
			}
		})
	}
}

// TestModuleRootAndFiles checks that the walk finds this very file, so that a
// broken walk cannot make TestLint pass by checking nothing.
func TestModuleRootAndFiles(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := goFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(files, "internal/lint/lint_test.go") {
		t.Fatalf("goFiles(%s) does not list internal/lint/lint_test.go; got %d files", root, len(files))
	}
}
