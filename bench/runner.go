package bench

import (
	"context"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/cluster"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/supervisor"
)

// driver is what the load drives: a host, or a cluster member (which
// reaches a session wherever it lives).
type driver interface {
	Create(ctx context.Context, opts supervisor.CreateOptions) (session.SessionID, error)
	Followup(ctx context.Context, id session.SessionID, msg messages.Message) error
	WaitIdle(ctx context.Context, id session.SessionID) error
}

// runner is the system under load: one host, or Options.Cluster members.
type runner struct {
	drivers []driver
	hosts   []*supervisor.Host // the local hosts (for residency counts)
	stats   func(ctx context.Context, id session.SessionID) (supervisor.Stats, error)
	close   func(ctx context.Context) error
}

func openRunner(ctx context.Context, o Options, hcfg supervisor.Config) (*runner, error) {
	if o.Cluster == 0 {
		h, err := supervisor.Open(hcfg)
		if err != nil {
			return nil, err
		}
		return &runner{drivers: []driver{h}, hosts: []*supervisor.Host{h},
			stats: h.Stats,
			close: h.Close}, nil
	}
	dir := hcfg.Dir
	hcfg.Dir = ""
	ms, err := cluster.StartLocal(ctx, o.Cluster, cluster.Config{Dir: dir, Session: hcfg})
	if err != nil {
		return nil, err
	}
	r := &runner{stats: ms[0].Stats, close: func(ctx context.Context) error { return cluster.CloseAll(ctx, ms) }}
	for _, m := range ms {
		r.drivers = append(r.drivers, m)
		r.hosts = append(r.hosts, m.Host())
	}
	return r, nil
}
