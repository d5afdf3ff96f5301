// Package cluster runs dsh's sessions across processes and machines, on
// protoactor's cluster (see docs/cluster.md). Each session is a virtual
// actor — a grain of the kind [Kind] — addressed by its session id,
// placed on one member by the cluster's identity lookup (disthash:
// rendezvous hashing over the members), activated on first use and
// reactivated on a surviving member when its own dies. The members share
// one store directory.
//
// # Using it
//
// Start a member in each process ([Start]; [StartLocal] starts n of them
// in one process) and call the session methods on any member: each
// reaches the session wherever it lives.
//
//	m, err := cluster.Start(cluster.Config{Dir: "/shared/dsh", Bind: "10.0.0.5", Port: 7000,
//		Peers: []string{"10.0.0.5:6330", "10.0.0.6:6330"}, TLS: tc,
//		Session: supervisor.Config{Provider: model}})
//	defer m.Close(ctx)
//	id, err := m.Create(ctx, supervisor.CreateOptions{})
//	err = m.Followup(ctx, id, msg)
//	err = m.WaitIdle(ctx, id) // idle, and the turn is durable
//	msgs, err := m.Messages(ctx, id)
//
// A process that only calls (a command-line tool, a web front end) joins
// as a client with [Dial]: the same methods, no session hosted.
//
//	c, err := cluster.Dial(ctx, cluster.ClientConfig{Peers: []string{"10.0.0.5:6330"}, TLS: tc})
//	defer c.Close()
//
// A Member and a Client are both a supervisor.Sessions, as a
// supervisor.Host is: code written against that interface (dsh run and
// chat, the HTTP server) runs on one process or on a cluster alike.
// List and Peek read the members' shared store; a Client reads it when
// its ClientConfig.Store names it, and otherwise List fails with
// [ErrNoStore] and Peek asks the session's member.
//
// `dsh member` runs a member from the command line; `dsh bench --cluster
// N` runs the N members of [StartLocal].
//
// # Members
//
// A [Member] is a supervisor.Host (the sessions placed on it, running
// with ManualResume so only the session's grain brings a session in) plus
// the session grains and a [Client]. Its methods — Create, Followup,
// Steer, Inject, Cancel, SetSystem, WaitIdle, Flush, Messages, Events,
// Subscribe, Fork, Stats, Owner — reach a session wherever it lives; the
// errors keep their identity across members ([RemoteError] unwraps to
// supervisor.ErrNoSession, supervisor.ErrExists, persister.ErrLocked,
// ...). A call retries, with backoff, while the session's grain is
// unreachable (its member died and the membership has not caught up yet)
// or answers that the session is being handed over, until the call's
// context is done. A Send is deduplicated by message id on the grain (and
// against the messages the log already holds), so a followup retried
// across a failover is delivered once.
//
// [Client.Subscribe] long-polls the grain (GetEvents with a wait), so a
// subscription follows its session from member to member without a gap
// or a repeat, and a slow consumer only slows its own polling.
//
// # Grains
//
// A session's grain serves the requests for it in the order they arrive,
// and nothing that waits runs inside the grain's Receive while it serves
// them. Loading the session from the store (taking its writer lock,
// reading and repairing its log) runs in a goroutine that reports back,
// and the requests that arrive meanwhile wait in the grain, in order. So
// a slow load (a long log, a slow network file system) delays its own
// session and no other. A load that fails answers the requests that
// waited for it with its error; the next request loads again. The other
// requests run off the mailbox too: Create, Send, Cancel, SetSystem,
// Messages, Stats, Fork and Release one at a time, each completing before
// the next one starts; WaitIdle, Events and Flush start in order and run
// concurrently. A grain that stops answers the requests still waiting
// CLOSED (the caller retries), lets go of whatever a load in flight
// brings in, and waits for the request running before it hands the
// session over (see Handing over). docs/cluster.md#grains has the whole
// story.
//
// # Wire
//
// Every message between members is protobuf (package clusterpb, the
// generated code committed): protoactor's remote drops anything else
// (silently, with only a timeout at the caller). A session's JSON —
// messages and events — travels as bytes, exactly as the log stores it.
// The remote is gRPC: plaintext, or mutual TLS with Config.TLS (see
// Security).
//
// # Discovery
//
// By default members find each other through a static peer list
// (Config.Peers): each member serves a health endpoint on
// Bind:ProviderPort and polls every peer's each Refresh; the members are
// the peers that answer. The wire is protoactor's automanaged provider's
// (GET /_health answering its node JSON), but the provider is dsh's own:
// protoactor's binds its endpoint on every interface, prints a banner on
// stdout, and polls in plain HTTP only. It suits one machine or a few
// known hosts. For anything dynamic pass another protoactor provider as
// Config.Provider, from the protoactor-go module: consul
// (cluster/clusterproviders/consul, against a Consul agent), etcd
// (clusterproviders/etcd, against an etcd cluster), Kubernetes
// (clusterproviders/k8s, members discover pods with the kind label
// through the API server) or zookeeper (clusterproviders/zk). dsh does
// not import them (each brings its client library); the rest of the
// member is the same:
//
//	import "github.com/asynkron/protoactor-go/cluster/clusterproviders/consul"
//
//	p, err := consul.New() // the Consul agent of this host
//	m, err := cluster.Start(cluster.Config{Dir: "/shared/dsh", Bind: "10.0.0.5", Port: 7000, Provider: p, TLS: tc})
//
// etcd.New() (an etcd cluster, 127.0.0.1:2379 by default, or
// etcd.NewWithConfig) and k8s.New() (inside a pod: the API server of
// rest.InClusterConfig; the pods need RBAC to watch and patch pods) are
// used the same way. With a provider of its own a member binds no health
// endpoint; Bind and Port must be reachable by the other members, and
// the provider's own traffic is as secure as that provider makes it.
//
// # Security
//
// Whoever reaches a member's remote can create sessions and read every
// session's messages. With Config.TLS (and ClientConfig.TLS for a
// client; LoadTLS reads the PEM files of `dsh member --tls-cert --tls-key
// --tls-ca`) every connection is mutual TLS: the remote between members
// and from clients, and the health endpoint (HTTPS, each poll
// authenticated both ways). A member accepts only a peer whose
// certificate the configured CA signed for client authentication, and
// connects only to a peer whose certificate the CA signed for the
// address it dials (so each certificate carries its process's Bind as a
// subject alternative name — a client's too, as the members connect back
// to it with the replies — and is valid for server and client
// authentication). A member or client refused is not counted as a
// member and never learns the members' addresses from the health
// endpoint; the member refusing it keeps serving, and reports each
// refused certificate once through Config.OnRefused (a peer retries
// every refresh, a client every attempt). The health endpoint carries
// no session data — a node's id, address and kinds — but it decides
// membership, so it is protected too.
//
// Without TLS, Validate refuses a Bind that is not a loopback address
// (ErrInsecure) unless Config.Insecure is set: plaintext only where no
// other machine can reach it.
//
// # Shared storage and fencing
//
// Every member opens the same store directory (Config.Dir): a session's
// log is where the reference layout puts it, whichever member writes it.
// protoactor does not guarantee a single activation: while members
// disagree about the membership, two can activate one session. The store
// fences writers with an exclusive lock file beside each log
// (session.lock, see persister.JSONLConfig.Lock): a member takes it
// before it writes or repairs a session and holds it until it lets the
// session go. The second activation cannot take it: it answers LOCKED
// (naming the holder), stops, and has written nothing; the caller retries
// and reaches the session wherever it lives. The log header is the
// reference's, unchanged. The store's seq check (an append whose first
// seq is not the stored next seq is refused) stays as a second line.
//
// A member that dies releases its locks with its process (the kernel
// drops them), so a survivor takes its sessions over: it loads the log,
// cuts a torn tail, closes the interrupted turn (turn/end interrupted)
// and goes on. Everything acknowledged durable (WaitIdle, Flush) is kept.
//
// Across machines the directory is a network file system, which must
// provide: byte-range locks honoured across clients (fcntl/OFD locks:
// NFSv4, or NFSv3 with lockd and statd; not mounted nolock or
// local_lock), and close-to-open consistency (the default: a member that
// takes a lock and opens a log sees everything the previous holder wrote
// and closed). With NFSv4 a member cut off from the server longer than
// the lease loses its locks; its later writes fail (EIO), so its sessions
// fail closed rather than write over the new holder. See
// docs/cluster.md#fencing, docs/durability.md#writer-locks and
// docs/durability.md#network-file-systems.
//
// # Handing over
//
// A grain stops when its session moves (the membership changed and the
// identity now belongs to another member) or its member closes: the
// running turn may finish within Config.HandoffTimeout, then it is
// disposed; the session is flushed and evicted from the host, which
// releases its writer lock, and the new owner loads it on its next
// request. [Member.Close] leaves the cluster this way.
//
// # Passivation
//
// With Config.Session.IdleTimeout (`dsh member --passivate-after`, ten
// minutes by default there) a member's host passivates a session idle
// that long (flushed, its actors stopped, its writer lock released), and
// the session's grain stops once the session is gone and no request came
// for as long; the next request activates a grain again, which resumes
// the session from the store. Without it, sessions and grains stay on
// their member until it closes or they move.
//
// # Goroutines
//
// protoactor's cluster keeps some goroutines for a while after a member
// is shut down (see the TestMain of this package's tests for exactly
// which, and why); a process that starts and stops members repeatedly
// sees them end on their own.
package cluster
