package messages_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

// snapshot is everything observable about a value, as text.
type snapshot func() string

// TestMutatingInputsAndGetterResultsNeverChangesAValue mutates every input a
// caller still holds after construction, and every slice a getter handed out,
// and checks that the value's JSON (and getters) read the same afterwards.
func TestMutatingInputsAndGetterResultsNeverChangesAValue(t *testing.T) {
	for _, tc := range []struct {
		name string
		// build constructs a value, returning its snapshot and a function
		// that mutates everything the caller holds or was given.
		build func(t *testing.T) (snapshot, func())
	}{
		{"message content input", func(t *testing.T) (snapshot, func()) {
			nested := []messages.ContentBlock{messages.TextBlock("n")}
			content := []messages.ContentBlock{messages.TextBlock("a"), messages.ToolResultBlock("c", nested, messages.ToolSucceeded)}
			m, err := messages.NewUserMessage(content, messages.UserSource())
			require.NoError(t, err)
			return messageSnapshot(m), func() {
				content[0], content[1], nested[0] = messages.TextBlock("x"), messages.TextBlock("y"), messages.TextBlock("z")
				clear(content)
			}
		}},
		{"message getters", func(t *testing.T) (snapshot, func()) {
			m := messages.NewToolResultMessage("c", []messages.ContentBlock{messages.TextBlock("out"), messages.TextBlock("more")}, messages.ToolFailed)
			return messageSnapshot(m), func() {
				cs := m.Content()
				nested := cs[0].Content()
				nested[0] = messages.TextBlock("hacked")
				cs[0] = messages.TextBlock("hacked")
				inner := m.Block(0).Content()
				inner[1] = messages.TextBlock("hacked")
				for b := range m.Blocks() {
					bc := b.Content()
					clear(bc)
				}
				bs := m.JSON().Bytes()
				clear(bs)
				keys := m.JSON().Keys()
				keys[0] = "hacked"
				srcBytes := m.Source().JSON().Bytes()
				clear(srcBytes)
			}
		}},
		{"message WithContent input", func(t *testing.T) (snapshot, func()) {
			base := messages.NewToolResultMessage("c", nil, messages.ToolSucceeded)
			content := []messages.ContentBlock{messages.TextBlock("a")}
			m := base.WithContent(content)
			return messageSnapshot(m), func() { content[0] = messages.TextBlock("b") }
		}},
		{"imported message from bytes", func(t *testing.T) (snapshot, func()) {
			raw := []byte(`{"id":"a","role":"user","content":[{"type":"text","text":"t"}],"source":{"kind":"user"}}`)
			j, err := messages.ParseJSON(raw)
			require.NoError(t, err)
			m, err := messages.ImportMessage(j)
			require.NoError(t, err)
			return messageSnapshot(m), func() { clear(raw) }
		}},
		{"tool-result block", func(t *testing.T) (snapshot, func()) {
			content := []messages.ContentBlock{messages.TextBlock("a"), messages.TextBlock("b")}
			b := messages.ToolResultBlock("c", content, messages.ToolSucceeded)
			return blockSnapshot(b), func() {
				content[0] = messages.TextBlock("x")
				got := b.Content()
				got[1] = messages.TextBlock("y")
			}
		}},
		{"tool-result block WithNestedContent", func(t *testing.T) (snapshot, func()) {
			content := []messages.ContentBlock{messages.TextBlock("a")}
			b, err := messages.ToolResultBlock("c", nil, messages.ToolSucceeded).WithNestedContent(content)
			require.NoError(t, err)
			return blockSnapshot(b), func() { content[0] = messages.TextBlock("x") }
		}},
		{"image block attachment from bytes", func(t *testing.T) (snapshot, func()) {
			raw := []byte(`{"attachmentId":"sha256:aa"}`)
			att, err := messages.ParseJSON(raw)
			require.NoError(t, err)
			b, err := messages.ImageBlock(att)
			require.NoError(t, err)
			return blockSnapshot(b), func() {
				clear(raw)
				clear(b.Attachment().Bytes())
			}
		}},
		{"call config stop", func(t *testing.T) (snapshot, func()) {
			stop := []string{"a", "b"}
			c := messages.CallConfig{Provider: "p", Model: "m"}.WithStop(stop...)
			snap := func() string { return c.JSON().String() + strings.Join(c.Stop(), "|") }
			return snap, func() {
				stop[0] = "x"
				got := c.Stop()
				got[1] = "y"
				clear(c.JSON().Bytes())
			}
		}},
		{"JSON from bytes", func(t *testing.T) (snapshot, func()) {
			raw := []byte(` {"b":[1,2],"a":"x"} `)
			j, err := messages.ParseJSON(raw)
			require.NoError(t, err)
			snap := func() string { return j.String() + strings.Join(j.Keys(), "|") }
			return snap, func() {
				clear(raw)
				clear(j.Bytes())
				keys := j.Keys()
				keys[0] = "z"
				for _, v := range j.Members() {
					clear(v.Bytes())
				}
			}
		}},
		{"JSON already compact from bytes", func(t *testing.T) (snapshot, func()) {
			raw := []byte(`{"a":"x"}`)
			j, err := messages.ParseJSON(raw)
			require.NoError(t, err)
			return j.String, func() { copy(raw, `{"b":"y"}`) }
		}},
		{"JSON from UnmarshalJSON", func(t *testing.T) (snapshot, func()) {
			raw := []byte(`[1,2,3]`)
			var j messages.JSON
			require.NoError(t, j.UnmarshalJSON(raw))
			return j.String, func() { clear(raw) }
		}},
		{"plugin source extra", func(t *testing.T) (snapshot, func()) {
			raw := []byte(`{"form":"notice","summary":"s"}`)
			extra, err := messages.ParseJSON(raw)
			require.NoError(t, err)
			s, err := messages.PluginSource("p", extra)
			require.NoError(t, err)
			return s.JSON().String, func() { clear(raw) }
		}},
		{"stream chunk", func(t *testing.T) (snapshot, func()) {
			content := []messages.ContentBlock{messages.TextBlock("a")}
			c := messages.BlockEndChunk(0, messages.ToolResultBlock("c", content, messages.ToolSucceeded))
			return c.JSON().String, func() {
				content[0] = messages.TextBlock("b")
				got := c.Block().Content()
				got[0] = messages.TextBlock("c")
			}
		}},
		{"object builder after build", func(t *testing.T) (snapshot, func()) {
			var o messages.ObjectBuilder
			j := o.String("a", "b").Build()
			return j.String, func() {
				o.Reset()
				o.String("x", "yyyyyyyy").Build()
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap, mutate := tc.build(t)
			before := snap()
			mutate()
			require.Equal(t, before, snap())
		})
	}
}

func messageSnapshot(m messages.Message) snapshot {
	return func() string {
		var b strings.Builder
		b.WriteString(m.JSON().String())
		b.WriteString(string(m.ID()) + string(m.Role()) + m.Source().JSON().String())
		for _, c := range m.Content() {
			b.WriteString(blockSnapshot(c)())
		}
		return b.String()
	}
}

func blockSnapshot(c messages.ContentBlock) snapshot {
	return func() string {
		var b strings.Builder
		b.WriteString(c.JSON().String())
		b.WriteString(c.Attachment().String())
		for _, n := range c.Content() {
			b.WriteString(blockSnapshot(n)())
		}
		return b.String()
	}
}

// valueTypes are the package's exported structs. Each is an immutable value
// (or, for the option and usage types, a struct of scalars): none may have an
// exported field through which a holder could reach shared mutable storage.
//
// ObjectBuilder is exempt: it is not a value but a scratch buffer that its
// owner fills and then turns into an immutable JSON with Build (which copies).
// It is never stored in or shared between values.
var valueTypes = []reflect.Type{
	reflect.TypeFor[messages.Message](),
	reflect.TypeFor[messages.ContentBlock](),
	reflect.TypeFor[messages.Source](),
	reflect.TypeFor[messages.ModelSource](),
	reflect.TypeFor[messages.TokenUsage](),
	reflect.TypeFor[messages.OptInt](),
	reflect.TypeFor[messages.OptFloat](),
	reflect.TypeFor[messages.LlmFailure](),
	reflect.TypeFor[messages.FinishReason](),
	reflect.TypeFor[messages.StreamChunk](),
	reflect.TypeFor[messages.CallConfig](),
	reflect.TypeFor[messages.ToolSchema](),
	reflect.TypeFor[messages.JSON](),
}

var exemptTypes = []reflect.Type{reflect.TypeFor[messages.ObjectBuilder]()}

// mutableFields returns the paths of exported fields of t, followed
// recursively through exported fields of struct (and array) type, whose type
// can reach mutable shared storage.
func mutableFields(t reflect.Type, path string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		p := path + "." + f.Name
		ft := f.Type
		for ft.Kind() == reflect.Array {
			ft = ft.Elem()
		}
		switch ft.Kind() {
		case reflect.Slice, reflect.Map, reflect.Pointer, reflect.UnsafePointer,
			reflect.Interface, reflect.Chan, reflect.Func:
			out = append(out, p+" ("+f.Type.String()+")")
		case reflect.Struct:
			out = append(out, mutableFields(ft, p)...)
		}
	}
	return out
}

func TestNoExportedMutableFields(t *testing.T) {
	for _, typ := range valueTypes {
		t.Run(typ.Name(), func(t *testing.T) {
			require.Equal(t, reflect.Struct, typ.Kind())
			require.Empty(t, mutableFields(typ, typ.Name()))
		})
	}

	t.Run("the check fires", func(t *testing.T) {
		type inner struct {
			Fn func()
			//lint:ignore U1000 read only through reflection: an unexported slice is allowed
			ok  []int
			Arr [2][]byte
		}
		type bad struct {
			S  []string
			M  map[string]int
			P  *int
			A  any
			C  chan int
			In inner
			//lint:ignore U1000 read only through reflection: an unexported slice is allowed
			fine  []int
			Plain string
		}
		require.Equal(t, []string{
			"bad.S ([]string)", "bad.M (map[string]int)", "bad.P (*int)", "bad.A (interface {})",
			"bad.C (chan int)", "bad.In.Fn (func())", "bad.In.Arr ([2][]uint8)",
		}, mutableFields(reflect.TypeFor[bad](), "bad"))
	})

	// The explicit list must name every exported struct type of the package,
	// so that a new one cannot slip past this test.
	t.Run("the list is complete", func(t *testing.T) {
		files, err := filepath.Glob("*.go")
		require.NoError(t, err)
		var declared []string
		fset := token.NewFileSet()
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
			require.NoError(t, err)
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.TYPE {
					continue
				}
				for _, spec := range gd.Specs {
					ts := spec.(*ast.TypeSpec)
					if _, isStruct := ts.Type.(*ast.StructType); isStruct && ts.Name.IsExported() {
						declared = append(declared, ts.Name.Name)
					}
				}
			}
		}
		var listed []string
		for _, typ := range append(slices.Clone(valueTypes), exemptTypes...) {
			listed = append(listed, typ.Name())
		}
		slices.Sort(declared)
		slices.Sort(listed)
		require.Equal(t, declared, listed)
	})
}
