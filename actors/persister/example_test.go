package persister_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/supervisor"
)

// Open a store by URL, write a session's log into it as a barrier, and
// read it back. A host does the writing through the persister actor; a
// tool that reads or repairs logs uses a Store directly, like this.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "sessions")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	store, err := persister.Open("jsonl:" + filepath.Join(dir, "data"))
	if err != nil {
		panic(err)
	}
	defer store.Close()

	// A session's events come from its log (the session actor's, in a
	// host); here one user message.
	l, err := session.New(session.Header{ID: "s1", CreatedAt: 1, Cwd: "/work/proj"})
	if err != nil {
		panic(err)
	}
	msg, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("hello")}, messages.UserSource())
	if err != nil {
		panic(err)
	}
	if _, err := l.Append(session.UserMessage{Message: msg}.Draft(), 2); err != nil {
		panic(err)
	}

	if err := store.Create(l.Header()); err != nil {
		panic(err)
	}
	// Sync makes the append a barrier: durable when it returns nil.
	if err := store.Append(ctx, "s1", l.Events().Slice(), persister.Sync); err != nil {
		panic(err)
	}

	stored, err := store.Load(ctx, "s1")
	if err != nil {
		panic(err)
	}
	listed, err := store.List(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(stored.Header.ID, len(stored.Events), "event(s),", len(listed), "session(s) listed")
	// Output: s1 1 event(s), 1 session(s) listed
}

// Wire a store into a host: the host spawns one persister actor and
// tracks every session it runs with it, under the policy it is given.
// supervisor.Config{Dir: dir} alone opens a JSONL store with writer locks;
// a Store of one's own (a SQLite database here) goes in Config.Store, and
// the host closes it.
func ExampleOpen_host() {
	dir, err := os.MkdirTemp("", "sessions")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	store, err := persister.Open("sqlite:" + filepath.Join(dir, "sessions.db"))
	if err != nil {
		panic(err)
	}
	host, err := supervisor.Open(supervisor.Config{Store: store, Policy: persister.PolicyStrict})
	if err != nil {
		panic(err)
	}
	defer host.Close(context.Background())
	// host.Create, host.Followup, host.WaitIdle: see package supervisor.
}
