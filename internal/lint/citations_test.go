package lint

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestDocCitations checks that every citation of a document of docs/ in a Go
// file (a comment or a string literal, code or test) names a file that exists
// and, when it has an #anchor, a heading of that file. See doc.go.
func TestDocCitations(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	docs, err := readDocs(filepath.Join(root, "docs"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := goFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	cited := 0
	for _, rel := range files {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			t.Error(err)
			continue
		}
		if strings.HasPrefix(rel, "internal/lint/") {
			continue // its tests cite missing documents on purpose
		}
		fi, err := parseFile(fset, rel, src)
		if err != nil {
			t.Errorf("%s: parse: %v", rel, err)
			continue
		}
		cs := citations(fi)
		cited += len(cs)
		for _, v := range docs.check(cs) {
			t.Error(v)
		}
	}
	if len(docs) == 0 {
		t.Fatalf("no documents found under %s", filepath.Join(root, "docs"))
	}
	t.Logf("checked %d citations of %d documents", cited, len(docs))
}

// citationRE matches a citation of a document of docs/: the path, then an
// optional #anchor. It must not be preceded by a path character, so that
// some/other/docs/x.md is not taken for docs/x.md. A sentence's full stop
// after the path is not part of it: the path ends at ".md".
var citationRE = regexp.MustCompile(`(^|[^A-Za-z0-9_./-])(docs/[A-Za-z0-9_-]+(?:/[A-Za-z0-9_-]+)*\.md)(#[A-Za-z0-9_-]*)?`)

// citation is one docs/FILE.md[#anchor] found in a Go file.
type citation struct {
	pos    token.Position
	file   string // docs/FILE.md, slash-separated, relative to the module root
	anchor string // without the '#'; "" when the citation names the file only
}

// citations returns the citations of docs/ in fi's comments and string
// literals, each with the line it is on.
func citations(fi *fileInfo) []citation {
	var out []citation
	scan := func(start token.Pos, text string) {
		base := fi.fset.Position(start)
		for _, m := range citationRE.FindAllStringSubmatchIndex(text, -1) {
			c := citation{pos: base, file: text[m[4]:m[5]]}
			c.pos.Line += strings.Count(text[:m[4]], "\n")
			if m[6] >= 0 {
				c.anchor = text[m[6]+1 : m[7]]
			}
			out = append(out, c)
		}
	}
	for _, cg := range fi.file.Comments {
		for _, c := range cg.List {
			scan(c.Pos(), c.Text)
		}
	}
	ast.Inspect(fi.file, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			scan(lit.Pos(), lit.Value)
		}
		return true
	})
	return out
}

// docSet maps each document of docs/ (as "docs/FILE.md") to the anchors of
// its headings.
type docSet map[string]map[string]bool

// readDocs reads every .md file directly under dir (and its subdirectories)
// into a docSet.
func readDocs(dir string) (docSet, error) {
	docs := docSet{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(filepath.Dir(dir), p)
		if err != nil {
			return err
		}
		docs[filepath.ToSlash(rel)] = headingAnchors(string(b))
		return nil
	})
	return docs, err
}

// check reports each citation that names a document not in the set, or an
// anchor that is not one of the document's headings.
func (d docSet) check(cs []citation) []violation {
	var out []violation
	for _, c := range cs {
		anchors, ok := d[c.file]
		switch {
		case !ok:
			out = append(out, violation{pos: c.pos, msg: "cites " + c.file + ", which does not exist"})
		case c.anchor != "" && !anchors[c.anchor]:
			out = append(out, violation{pos: c.pos, msg: "cites " + c.file + "#" + c.anchor + ", which is not a heading of " + c.file})
		}
	}
	return out
}

// headingAnchors returns the anchors of the ATX headings (# to ######) of a
// Markdown document, outside fenced code blocks, as GitHub renders them: see
// anchor. A heading that repeats an earlier anchor gets -1, -2, ... appended,
// as on GitHub.
func headingAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fence := ""
	for line := range strings.Lines(md) {
		line = strings.TrimRight(line, "\r\n")
		trimmed := strings.TrimLeft(line, " ")
		if len(line)-len(trimmed) > 3 {
			continue // indented code
		}
		if f := fenceOf(trimmed); f != "" {
			switch {
			case fence == "":
				fence = f
			case strings.HasPrefix(f, fence) && strings.TrimLeft(trimmed, f[:1]) == "":
				fence = ""
			}
			continue
		}
		if fence != "" {
			continue
		}
		text, ok := headingText(trimmed)
		if !ok {
			continue
		}
		a := anchor(text)
		if n := seen[a]; n > 0 {
			seen[a]++
			a += "-" + strconv.Itoa(n)
		} else {
			seen[a] = 1
		}
		anchors[a] = true
	}
	return anchors
}

// fenceOf returns the fence (``` or ~~~, possibly longer) that line opens or
// closes, or "".
func fenceOf(line string) string {
	for _, c := range []string{"`", "~"} {
		n := len(line) - len(strings.TrimLeft(line, c))
		if n >= 3 {
			return line[:n]
		}
	}
	return ""
}

// headingText returns the text of an ATX heading line: after one to six #s
// and a space, without a closing run of #s.
func headingText(line string) (string, bool) {
	n := len(line) - len(strings.TrimLeft(line, "#"))
	if n < 1 || n > 6 || (len(line) > n && line[n] != ' ' && line[n] != '\t') {
		return "", false
	}
	text := strings.TrimSpace(line[n:])
	if closed := strings.TrimRight(text, "#"); closed != text && (closed == "" || strings.HasSuffix(closed, " ")) {
		text = strings.TrimSpace(closed)
	}
	return text, true
}

// anchor is GitHub's anchor for a heading's text: lowercased, every character
// that is not a letter, a digit, a space, a hyphen or an underscore dropped
// (so punctuation and the backticks of inline code go), and each space turned
// into a hyphen.
func anchor(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestCitationChecker proves the checker finds citations where they are
// written, computes anchors as GitHub does, and reports a broken one with
// file:line, before TestDocCitations trusts it to be silent on the tree.
func TestCitationChecker(t *testing.T) {
	docs := docSet{
		"docs/log-format.md": headingAnchors("# The session log format\n\n" +
			"## Format version\n\ntext\n\n" +
			"## Older shapes\n\n" +
			"```\n## Not a heading\n```\n\n" +
			"### `dsh log` commands: what they do!\n\n" +
			"## Older shapes\n\n" +
			"    ## indented code\n" +
			"## Closed heading ##\n"),
		"docs/replay.md": headingAnchors("# Log replay\n## The rule\n"),
	}
	src := `package x

// See docs/log-format.md#format-version and docs/log-format.md.
// Also docs/replay.md#the-rule. And docs/log-format.md#older-shapes-1, then
// docs/log-format.md#dsh-log-commands-what-they-do and
// docs/log-format.md#closed-heading.
// Broken: docs/log-format.md#format-versions, docs/missing.md,
// docs/replay.md#not-a-heading and docs/log-format.md#Format-Version.
/* a block comment
   with docs/replay.md#nope on its second line */
const help = "see docs/log-format.md#older-shape"

// Not citations: other/docs/replay.md#x, mydocs/missing.md.
var _ = ` + "`" + `raw
docs/nowhere.md` + "`\n"
	fi, err := parseFile(token.NewFileSet(), "actors/x/x.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if got := len(citations(fi)); got != 13 {
		t.Errorf("found %d citations, want 13", got)
	}
	var got []string
	for _, v := range docs.check(citations(fi)) {
		got = append(got, v.String())
	}
	slices.Sort(got)
	want := []string{
		"actors/x/x.go:10: cites docs/replay.md#nope, which is not a heading of docs/replay.md",
		"actors/x/x.go:11: cites docs/log-format.md#older-shape, which is not a heading of docs/log-format.md",
		"actors/x/x.go:15: cites docs/nowhere.md, which does not exist",
		"actors/x/x.go:7: cites docs/log-format.md#format-versions, which is not a heading of docs/log-format.md",
		"actors/x/x.go:7: cites docs/missing.md, which does not exist",
		"actors/x/x.go:8: cites docs/log-format.md#Format-Version, which is not a heading of docs/log-format.md",
		"actors/x/x.go:8: cites docs/replay.md#not-a-heading, which is not a heading of docs/replay.md",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\ngot\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// TestAnchor pins GitHub's anchor rule on the kinds of heading docs/ has.
func TestAnchor(t *testing.T) {
	for text, want := range map[string]string{
		"Write-behind and barriers":            "write-behind-and-barriers",
		"Creation, resume and teardown":        "creation-resume-and-teardown",
		"Turn-end reasons and cancel causes":   "turn-end-reasons-and-cancel-causes",
		"`dsh log` commands: what they do!":    "dsh-log-commands-what-they-do",
		"Where dsh differs from the reference": "where-dsh-differs-from-the-reference",
		"Format v0 (JSONL + zstd)":             "format-v0-jsonl--zstd",
		"snake_case stays":                     "snake_case-stays",
		"Über große Logs":                      "über-große-logs",
	} {
		if got := anchor(text); got != want {
			t.Errorf("anchor(%q) = %q, want %q", text, got, want)
		}
	}
}

// outsideRefs match a citation of a document that is not in the
// repository: a section of the reference's specification or of the design
// notes, or a path into the directory beside the checkout. Comments cite
// docs/ instead (TestDocCitations checks those). A section sign may follow
// its document's name on the next comment line.
var outsideRefs = []*regexp.Regexp{
	regexp.MustCompile(`\bspec(?:\s|//)*§`),
	regexp.MustCompile(`\bDESIGN(?:\s|//)*§`),
	regexp.MustCompile(`harness-spe[c]`), // [c]: this line does not match itself
	regexp.MustCompile(`\bDESIGN\.md\b`),
	regexp.MustCompile(`\.\./shared\b`),
}

// noOutsideCitations refuses, anywhere in a Go file (code or test), a
// citation of a document outside the repository: someone who has only the
// repository cannot follow it.
func noOutsideCitations(fi *fileInfo) []violation {
	var out []violation
	for _, re := range outsideRefs {
		for _, m := range re.FindAllIndex(fi.src, -1) {
			pos := fi.fset.Position(fi.file.FileStart)
			pos.Line = 1 + bytes.Count(fi.src[:m[0]], []byte("\n"))
			out = append(out, violation{pos: pos, msg: fmt.Sprintf(
				"%q cites a document outside the repository; cite docs/FILE.md#section, or say it here",
				fi.src[m[0]:m[1]])})
		}
	}
	return out
}

// TestOutsideCitations proves noOutsideCitations fires on each kind of
// outside citation, in comments and strings, code and tests, and stays
// silent on look-alikes. The snippets spell the refused names in pieces so
// that this file does not cite them itself.
func TestOutsideCitations(t *testing.T) {
	const sect = "§"
	src := "package x\n\n" +
		"// The grammar of spec " + sect + "1.8 and DESIGN " + sect + "4.\n" + // line 3: two
		"// Split over lines: spec\n// " + sect + "2.13.\n" + // line 4
		"const help = \"see DESIGN" + ".md\"\n" + // line 6
		"/* ../" + "shared/reference/harness-" + "spec.md */\n" + // line 7: two
		"// Fine: a spec, the design, docs/session-log.md, " + sect + " alone, shared/x.\n" +
		"var specs = 1\n"
	fi, err := parseFile(token.NewFileSet(), "actors/x/x_test.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range noOutsideCitations(fi) {
		got = append(got, v.String())
	}
	slices.Sort(got)
	want := []string{
		`actors/x/x_test.go:3: "DESIGN ` + sect + `" cites`,
		`actors/x/x_test.go:3: "spec ` + sect + `" cites`,
		`actors/x/x_test.go:4: "spec\n// ` + sect + `" cites`,
		`actors/x/x_test.go:6: "DESIGN` + `.md" cites`,
		`actors/x/x_test.go:7: "../` + `shared" cites`,
		`actors/x/x_test.go:7: "harness-` + `spec" cites`,
	}
	if len(got) != len(want) {
		t.Fatalf("got %d violations, want %d:\n\t%s", len(got), len(want), strings.Join(got, "\n\t"))
	}
	for i := range got {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("violation %d:\ngot  %s\nwant %s...", i, got[i], want[i])
		}
	}
}
