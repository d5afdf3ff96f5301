package fstools_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/actors/agent/fstools"
	"github.com/dshgo/dsh/messages"
)

// The file tools over a workdir, in a registry as an agent gets them, each
// called as the model would call it: arguments as JSON, the answer a tool
// result. A path that climbs out of the workdir is refused with an error
// result, which the model reads.
func Example() {
	dir, err := os.MkdirTemp("", "fstools-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("milk\neggs\n"), 0o644); err != nil {
		panic(err)
	}

	set, err := fstools.New(dir)
	if err != nil {
		panic(err)
	}
	defer set.Close()
	reg, err := agent.NewRegistry(set.Tools()...)
	if err != nil {
		panic(err)
	}
	var names []string
	for _, s := range reg.Schemas() {
		names = append(names, s.Name)
	}
	fmt.Println(strings.Join(names, ", "))

	run := func(name, args string) {
		for _, t := range set.Tools() {
			if t.Name() != name {
				continue
			}
			r, err := t.Execute(context.Background(), agent.Call{Name: name, Arguments: args, Input: messages.MustParseJSON(args)})
			if err != nil {
				panic(err)
			}
			if r.IsError {
				fmt.Printf("%s: error %s\n", name, r.Error.Code)
				return
			}
			fmt.Printf("%s:\n%s\n", name, strings.TrimRight(r.Content[0].Text(), "\n"))
		}
	}
	run("read_file", `{"path":"notes.txt"}`)
	run("list_dir", `{"path":"."}`)
	run("read_file", `{"path":"../secret.txt"}`)
	// Output:
	// glob, grep, list_dir, read_file
	// read_file:
	//      1	milk
	//      2	eggs
	// list_dir:
	// notes.txt
	// read_file: error OUTSIDE_WORKDIR
}
