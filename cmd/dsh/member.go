package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/llm/deepseek"
	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/cluster"
	"github.com/dshgo/dsh/supervisor"
)

const memberUsage = `Usage: dsh member --dir DIR [flags]

Runs one member of a dsh cluster until SIGINT or SIGTERM. Sessions are
placed on the members by id; every member shares DIR (one directory on
one machine, a network file system across machines: each session's log
is fenced by a writer lock beside it). Members find each other through
protoactor's automanaged provider: each serves a health endpoint on
--bind:--provider-port and polls every --peers entry (every member's
endpoint; its own may be left out). --bind must be an address the other
members can reach (not 0.0.0.0). A member that dies leaves the
cluster within about --refresh; its sessions move to the others, which
repair and resume them from DIR.

It reports on stderr (or, with --json, as one JSON object per line on
stdout, nothing else): "up" with its address and the members it sees,
"members" each time they change, and "left". On SIGINT or SIGTERM the
member hands its sessions over (a running turn may finish within
--handoff), leaves, and exits 0.

Flags:
`

// splitPeers splits a --peers list (comma-separated host:port).
func splitPeers(peers string) []string {
	var out []string
	for p := range strings.SplitSeq(peers, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// sortedMembers returns the addresses m sees, sorted.
func sortedMembers(m *cluster.Member) []string {
	ms := m.Members()
	slices.Sort(ms)
	return ms
}

// memberCmd is `dsh member`.
func memberCmd(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runMember(ctx, args, stdout, stderr)
}

func runMember(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("member")
	var cfg cluster.Config
	var peers, provider, model string
	var speed float64
	var asJSON bool
	var passivate time.Duration
	fs.StringVar(&cfg.Dir, "dir", "", "the store directory every member shares (required)")
	fs.StringVar(&cfg.Name, "name", cluster.DefaultName, "cluster name")
	fs.StringVar(&cfg.Bind, "bind", cluster.DefaultBind, "address to listen on (remote and provider endpoint)")
	fs.IntVar(&cfg.Port, "port", 0, "actor remote port (0: a free one)")
	fs.IntVar(&cfg.ProviderPort, "provider-port", cluster.DefaultProviderPort, "automanaged provider endpoint port")
	fs.StringVar(&peers, "peers", "", "comma-separated provider endpoints (host:port) of every member (default: this one only)")
	fs.DurationVar(&cfg.Refresh, "refresh", cluster.DefaultRefresh, "how often members poll each other")
	fs.DurationVar(&cfg.HandoffTimeout, "handoff", cluster.DefaultHandoffTimeout, "how long a moving session may finish its turn")
	fs.StringVar(&provider, "provider", "synthetic", "model provider: synthetic or deepseek")
	fs.StringVar(&model, "model", "", "model id (default: the provider's)")
	fs.Float64Var(&speed, "synthetic-speed", 0, "synthetic: tokens per second per stream (0: as fast as possible)")
	fs.DurationVar(&passivate, "passivate-after", 10*time.Minute, "stop a session idle this long (it resumes from --dir on its next request; 0: never)")
	fs.BoolVar(&asJSON, "json", false, "print events as JSON objects on stdout, one per line")
	if err := parseFlags(fs, args, memberUsage, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("member: unexpected argument %q", fs.Arg(0))
	}
	if cfg.Dir == "" {
		return usagef("member: --dir is required")
	}
	cfg.Peers = splitPeers(peers)
	if err := cfg.Validate(); err != nil {
		return usagef("member: %v", err)
	}
	var prov llm.Provider
	switch provider {
	case "synthetic":
		if speed < 0 {
			return usagef("member: --synthetic-speed must not be negative")
		}
		p, err := synthetic.New(synthetic.Config{Model: model, TextChunks: 40, TokensPerSecond: speed})
		if err != nil {
			return err
		}
		prov = p
	case "deepseek":
		p, err := deepseek.New(deepseek.Config{Model: model})
		if err != nil {
			return err
		}
		prov = p
	default:
		return usagef("member: unknown --provider %q (synthetic or deepseek)", provider)
	}
	if passivate < 0 {
		return usagef("member: --passivate-after must not be negative")
	}
	cfg.Session = supervisor.Config{Provider: prov, Model: model, IdleTimeout: passivate}

	m, err := cluster.Start(cfg)
	if err != nil {
		return err
	}
	addr := m.Address()
	emit := func(event string, members []string) {
		if asJSON {
			b, _ := json.Marshal(struct {
				Event   string   `json:"event"`
				Address string   `json:"address"`
				Cluster string   `json:"cluster"`
				Members []string `json:"members,omitempty"`
			}{event, addr, cfg.Name, members})
			fmt.Fprintf(stdout, "%s\n", b)
			return
		}
		switch event {
		case "up":
			fmt.Fprintf(stderr, "dsh member %s: up in cluster %q on %s; members: %s\n", addr, cfg.Name, cfg.Dir, strings.Join(members, ", "))
		case "members":
			fmt.Fprintf(stderr, "dsh member %s: members: %s\n", addr, strings.Join(members, ", "))
		case "left":
			fmt.Fprintf(stderr, "dsh member %s: left the cluster\n", addr)
		}
	}
	seen := sortedMembers(m)
	emit("up", seen)
	tick := time.NewTicker(cfg.Refresh)
	defer tick.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
			if now := sortedMembers(m); !slices.Equal(now, seen) {
				seen = now
				emit("members", seen)
			}
		}
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), cfg.HandoffTimeout+time.Minute)
	defer cancel()
	if err := m.Close(closeCtx); err != nil {
		return fmt.Errorf("member %s: close: %w", addr, err)
	}
	emit("left", nil)
	return nil
}
