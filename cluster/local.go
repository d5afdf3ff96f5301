package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// StartLocal starts n members on one machine, each with cfg (Bind
// defaults to 127.0.0.1; Port, ProviderPort, Peers and Provider are
// chosen here: free ports, every member a peer of every other), and
// returns once each sees all n. It is the cluster of `dsh bench
// --cluster N` and a convenient test bed. Close each member when done.
func StartLocal(ctx context.Context, n int, cfg Config) ([]*Member, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cluster: StartLocal: %d members", n)
	}
	if cfg.Bind == "" {
		cfg.Bind = DefaultBind
	}
	lns := make([]net.Listener, n)
	peers := make([]string, n)
	for i := range n {
		ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Bind, "0"))
		if err != nil {
			for _, l := range lns[:i] {
				_ = l.Close()
			}
			return nil, fmt.Errorf("cluster: provider endpoint: %w", err)
		}
		lns[i], peers[i] = ln, ln.Addr().String()
	}
	ms := make([]*Member, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		c := cfg
		c.Port, c.Provider, c.Peers, c.listener = 0, nil, peers, lns[i]
		wg.Go(func() { ms[i], errs[i] = Start(c) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for i, m := range ms {
			if m != nil {
				_ = m.Close(context.WithoutCancel(ctx))
			} else {
				_ = lns[i].Close()
			}
		}
		return nil, err
	}
	if err := waitMembers(ctx, ms, n); err != nil {
		_ = CloseAll(context.WithoutCancel(ctx), ms)
		return nil, err
	}
	return ms, nil
}

// waitMembers waits until every member of ms sees n members.
func waitMembers(ctx context.Context, ms []*Member, n int) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		ok := true
		for _, m := range ms {
			ok = ok && len(m.Members()) == n
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: members did not see each other: %w", context.Cause(ctx))
		case <-t.C:
		}
	}
}

// CloseAll closes members at once (each takes about two seconds) and
// joins their errors.
func CloseAll(ctx context.Context, ms []*Member) error {
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() { errs[i] = m.Close(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
