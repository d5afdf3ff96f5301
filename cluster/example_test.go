//go:build !race

package cluster_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/cluster"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/supervisor"
)

// Three members on one machine share a store directory; a session
// created through one is reached through any other.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "dsh-cluster-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	model, err := synthetic.New(synthetic.Config{Seed: 1, TextChunks: 5})
	if err != nil {
		fmt.Println(err)
		return
	}

	ms, err := cluster.StartLocal(ctx, 3, cluster.Config{Dir: dir, Session: supervisor.Config{Provider: model}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		if err := cluster.CloseAll(ctx, ms); err != nil {
			fmt.Println(err)
		}
	}()

	id, err := ms[0].Create(ctx, supervisor.CreateOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	msg, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("hello")}, messages.UserSource())
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := ms[1].Followup(ctx, id, msg); err != nil {
		fmt.Println(err)
		return
	}
	if err := ms[2].WaitIdle(ctx, id); err != nil { // idle, and the turn is durable
		fmt.Println(err)
		return
	}
	got, err := ms[0].Messages(ctx, id)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range got {
		fmt.Println(m.Role())
	}
	// Output:
	// user
	// assistant
}

// A process that hosts no session joins the cluster as a client, through
// the members' health endpoints, and reaches every session.
func ExampleDial() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tc, err := cluster.LoadTLS("client.pem", "client-key.pem", "ca.pem")
	if err != nil {
		fmt.Println(err)
		return
	}
	c, err := cluster.Dial(ctx, cluster.ClientConfig{Bind: "10.0.0.9", Peers: []string{"10.0.0.5:6330", "10.0.0.6:6330"}, TLS: tc})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	id, err := c.Create(ctx, supervisor.CreateOptions{Cwd: "/work/project"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("created", id, "on", c.Members())
}
