// Package lint holds no production code: its test, lint_test.go, is a
// repository-wide linter in the style of pebble's internal/lint. It enforces
// the house rules from STYLE.md that gofmt, go vet and staticcheck do not.
//
// # What it checks
//
// TestLint finds the module root by walking up from the test's working
// directory to the first go.mod, parses every .go file of the module with
// go/parser, and fails naming file:line for each of:
//
//	rule                                   where it applies
//	-------------------------------------  ---------------------------------------------
//	time.Sleep call                        *_test.go files
//	log.Fatal, log.Fatalf, log.Fatalln     every file not under cmd/ (tests included)
//	os.Exit call                           every file not under cmd/, except inside a
//	                                       top-level function named TestMain
//	fmt.Print, fmt.Println, fmt.Printf     every file not under cmd/ (tests included:
//	                                       tests use t.Log)
//	any or interface{} in an exported      non-test files under messages/
//	func/method signature, exported
//	struct field, exported interface
//	method, or type declaration
//	a citation of a document outside the   every file (tests included; the text
//	repository: a section of the           of the file, comments and strings alike)
//	reference's specification or of the
//	design notes, those documents' file
//	names, or a path beside the checkout
//	(the list is outsideRefs)
//
// Calls are matched by the package they resolve to, not by spelling: the
// checker reads each file's imports, so `stdlog "log"` followed by
// stdlog.Fatal is caught, while a selector on some other package that happens
// to be called fmt is not. Dot imports of fmt, log, os and time are honoured
// for calls in function position.
//
// In messages/, type-parameter constraints are not checked: `[T any]` does not
// put a dynamically typed value into the API, it is replaced by a concrete type
// at instantiation. Unexported fields and methods are not checked either: they
// are not part of what other packages can reach.
//
// # Citations of docs/
//
// TestDocCitations (citations_test.go) reads the headings of every Markdown
// file under docs/ and checks each citation of one in a Go file: every
// `docs/FILE.md` or `docs/FILE.md#anchor` written in a comment or a string
// literal, code and tests alike. The file must exist, and the anchor must be
// one of its headings as GitHub renders them: lowercased, every character
// other than a letter, a digit, a space, a hyphen or an underscore dropped,
// spaces turned into hyphens, and -1, -2, ... appended to a repeated one.
// Headings inside fenced code blocks do not count. The tests of this package
// are not checked: they cite missing documents on purpose.
//
// Citations of documents that are not in the repository are refused by
// noOutsideCitations (citations_test.go), one of the rules above: someone
// who has only the repository cannot follow them.
//
// # What it skips
//
// Directories the go tool ignores (vendor, testdata, and names starting with
// "." or "_") and nested modules (directories with their own go.mod). A local
// variable that shadows an imported package name is not detected, because the
// checker works on syntax alone; STYLE.md forbids such names (for example a
// variable called log) anyway.
//
// # Adding a rule
//
// Write a func(*fileInfo) []violation in lint_test.go, append it to rules, and
// add at least one firing and one non-firing snippet to TestRules, so that the
// rule is proven to fire before it is trusted to stay silent on the tree.
package lint
