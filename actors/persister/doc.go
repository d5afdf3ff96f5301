// Package persister makes session logs durable: the Store where logs live
// (an in-memory MemStore, the JSONL store on disk and the SQLite store)
// and the persister actor that writes a session's committed events behind
// it.
//
// # Using it
//
// A program that embeds dsh mostly only chooses a store: a
// supervisor.Host spawns the persister actor and tracks every session it
// runs. supervisor.Config{Dir: dir} opens a JSONL store with writer locks;
// Config.Store takes any other Store (the host closes it), and
// Config.Policy the durability policy ([PolicyTurnEnd] by default).
//
// [Open] names a store by URL, as the command line does: jsonl:DIR (a bare
// DIR is the same) or sqlite:PATH; [OpenReader] opens one for reading
// only, taking no writer lock and repairing nothing. [NewJSONLStore],
// [OpenSQLite] and [NewMemStore] build a store with options. A program
// that reads, copies or repairs logs uses a Store directly: Create a
// session, Append its events (with [Sync] the append is a barrier), Load
// it back, List what is stored. ExampleOpen does that; ExampleOpen_host
// wires a store into a host. [RepairFile] repairs one log file wherever
// it lies.
//
// An embedder with actors of its own talks to the persister actor
// directly ([Props] and the messages under The actor below): [Track] a
// session actor, [Flush] for a barrier, [Untrack] to let the session go;
// the owner PID named in Track hears [Durable], [WriteFailed] and
// [Retrying].
//
// What a barrier makes durable and what a crash can lose is told in full
// in docs/durability.md, the bytes of the files in docs/log-format.md;
// the sections below are the contract of this package's API.
//
// # The Store contract
//
// A [Store] keeps one append-only log per session id: a [session.Header]
// and the events, seqs contiguous from 0. It has the semantics of the
// reference's persistence service (docs/durability.md#the-store and
// docs/durability.md#loading):
//
//   - Create registers a header lazily. Nothing is stored before the first
//     Append, and a session that was never appended to is not in List.
//   - Append(ctx, id, events, durable) is all or nothing. Its first event
//     must carry the stored next seq and the rest must follow
//     contiguously; otherwise nothing is written and the error is a
//     [*FenceError]. The fence is what keeps two writers of one session
//     from interleaving: the loser of a race learns it from the error, and
//     the winner's events stand. With [NoSync] the events are written
//     (committed: every reader sees them) but not yet durable. With [Sync]
//     the call is a barrier: when it returns nil, its events and every
//     event appended before them are durable. An empty Append with Sync is
//     a barrier alone. A session's first Append carries the header with
//     the batch; with NoSync neither is durable yet (a store may make them
//     so all the same), and a crash may lose the session whole. A failed
//     Append (any error) leaves the log at its last durable event: the
//     batch, and what was appended with NoSync since the last barrier, are
//     gone, and the caller appends them again. The argument rather than a
//     separate sync call is what lets a store group the barriers of many
//     sessions (one transaction in a database store) and fold a pending
//     batch into the barrier's write.
//   - Load returns the log balanced and commits crash repair: a torn tail
//     (records a crash left half written after the last turn/end) is cut
//     off, and a turn left open is closed by appending the closers of
//     [session.InterruptedTurnClosers] (synthetic tool results, step/end,
//     turn/end {interrupted}). Damage before the last turn/end is never
//     repaired: it is corruption ([IsCorruption]).
//   - Inspect computes the same repair in memory only: nothing is written
//     and the revision stays. A reader (a status command, a viewer) uses it
//     so that looking at a session never changes it.
//   - ReadFrom returns stored events from a seq on, as stored: no repair.
//   - List names the materialized sessions, sorted by id, each with its
//     [Revision]: an opaque token that changes whenever the stored log
//     changes (an Append, a repair), so a cache can tell it is stale.
//   - Release ends the writer's hold on a session: its writer lock, if
//     the store takes one (see Writer fencing), and what the store cached
//     about the file, so that another process can take the session over.
//     It is a barrier first. Idempotent; a later write takes the lock
//     again.
//   - Close is a barrier of every session, then releases the store; every
//     later call fails with [ErrClosed].
//
// Resuming a session goes through Load: the session actor is rebuilt with
// [session.NewSeeded] from the loaded events, which appends a
// session/end-seed, and the persister writes only the suffix past the
// stored cursor (the loaded length), normally just that end-seed. Creating
// a new session under an id that is already stored fails with [ErrExists].
//
// The same conformance suite (conformance_test.go) runs against every
// Store implementation; a behaviour it pins is part of the contract.
//
// # What is durable when
//
// Events a session actor committed are, in order:
//
//	state       where                          a crash (or power loss)
//	received    the persister's queue          loses them
//	written     the file (the page cache)      may drop any suffix of them
//	durable     the disk (fdatasync returned)  never loses them
//
// The persister writes a batch behind (the window, the size bound) without
// an fsync: its events are written, and its Durable watermark does not
// move. Only a barrier fsyncs: a turn/end (PolicyTurnEnd and
// PolicyStrict), a request/header or tool/call (PolicyStrict), a Flush,
// an Untrack (the host's passivation, eviction and close untrack), the
// background retry of a failed write, and Store.Release and Store.Close.
// A barrier writes what the session has pending and fsyncs the file,
// which covers every byte written before it, by whatever descriptor; the
// watermark then advances to its last event, and only then do Flushed,
// Durable and the host's "turn ended" follow. A failed barrier (its write
// or its fsync) cuts the file back to its size at the last fsync that
// succeeded and never reuses that descriptor (after a failed fsync the
// page cache no longer says what is on disk); the persister queues again
// everything after the watermark, written or not, and retries it.
//
// Crash model: a crash drops any suffix of the bytes written since a
// file's last fsync, and nothing before it. The loader sees what survived
// as a torn tail (a record cut short, a zstd frame cut short or missing)
// and Load truncates it; whole records that survived past the last fsync
// are kept, as committed. So a loaded log holds every event that was
// acknowledged durable, byte for byte, and after it at most a gapless run
// of events that were written, then the closers of an interrupted turn.
// crash_test.go checks this on vfs.MemFS, crashing before every operation
// of a workload and dropping every possible suffix of the unsynced bytes,
// in both encodings.
//
// # Errors
//
// Match store errors with errors.Is and errors.As:
//
//	error          meaning
//	ErrNotFound    nothing is stored under the id (Load, Inspect, ReadFrom),
//	               or it is neither registered nor stored (Append)
//	ErrExists      Create of an id already registered or stored
//	ErrFenced      an Append's seqs do not continue the stored log; the
//	               error is a *FenceError with the seq wanted and the seq got
//	ErrLocked      another writer holds the session's writer lock (Append,
//	               Load); the error is a *LockedError naming the holder, and
//	               matches ErrFenced too
//	ErrClosed      the store was closed
//	IsCorruption   the committed region of a stored log is damaged (a
//	               *session.CorruptError); never repaired automatically
//
// Loading a log written in another format version fails with a
// *session.FormatVersionError, and one holding an unknown event type not
// marked ignorable with an error matching session.ErrInvalid (a
// *session.UnsupportedTypeError): both are refusals to guess, not damage.
// An unknown type marked ignorable round-trips untouched. Operations given
// a done context fail with its cause and change nothing.
//
// # The actor
//
// The persister actor tracks sessions and writes their committed events
// behind, batching them, through a Store. It answers to ctx.Sender(),
// echoing each request's Ref:
//
//	message    reply                     effect
//	Track      Tracked | TrackFailed     registers the header, subscribes to the
//	                                     session actor from seq From, writes behind
//	Flush      Flushed | FlushFailed     durability barrier for the session
//	Untrack    Flushed | FlushFailed     flushes, releases the session in the
//	                                     store (Store.Release), then forgets it
//
// and tells a tracked session's Owner, one way:
//
//	message      when
//	Durable      the durable watermark advanced to Seq
//	WriteFailed  a write failed; its events are kept and retried (Attempt:
//	             consecutive failures so far; RetryIn: when the retry comes)
//	Retrying     the persister retries a failed write on its own
//
// Durability policies (Config.Policy):
//
//	policy          writes                                      a Flush answers
//	PolicyTurnEnd   behind, unsynced, one fixed window (200 ms)  when written and fsynced
//	(default)       from the first buffered event or a size
//	                bound; every turn/end at once, fsynced (a
//	                durable checkpoint)
//	PolicyStrict    as above, and at once, fsynced, on           when written and fsynced
//	                request/header (before a model dispatch)
//	                and tool/call (before a tool body)
//	PolicyNone      nothing (memory only: tests, benchmarks)     at once
//
// Writes of all sessions share a bounded pool of FsyncWorkers goroutines
// (32 by default: concurrent fsyncs of different files complete faster
// than the same fsyncs in turn, see docs/performance.md#fsync-workers);
// a session has at most one write in flight, and whatever arrives during
// it (events, flush requests) joins the next batch: group commit. Barrier
// work (a barrier's write, Create, Release) goes ahead of background
// batches in the pool, so a turn end waits for at most the FsyncWorkers
// calls in flight, never behind other sessions' batches; a session's
// background batch still queued when its barrier starts takes the events
// queued since and becomes the barrier's write: one write, one fsync.
//
// A store of one database file for every session ([SQLiteStore]) gets group
// commit across sessions as well: its writes go to one committer goroutine
// instead of the workers, and each commit takes every write queued while the
// one before ran (barriers first, then background batches; at most 1024, of
// them at most 64 background ones, so that a turn end never waits behind a
// long commit) in one call, one transaction and one sync. Each
// session still has its own watermark: a batch refused inside the commit
// fails that session only, a commit that fails fails every session in it,
// and each failed session is retried as any failed write is. A background
// batch in a commit that held a barrier is durable with it.
//
// Stopping the persister fails pending barriers with ErrStopped and drops
// unwritten events (what was written unsynced stays in the file, for the
// store's Close to sync), so a host flushes (or untracks) every session
// first.
//
// A failed write is an expected failure: the events stay queued at the
// front, in order (with the events written unsynced before it, which the
// store cut off), and are retried with the next write; no event is dropped
// while the process lives. Barrier waiters get FlushFailed with the error
// and the watermark that was durable before it. Nobody has to flush for the
// retry to happen: after the n-th consecutive failed write the persister
// retries by itself after a backoff (Config.RetryMin and RetryMax: 100ms,
// 200ms, 400ms, ... doubling up to 5s with the defaults, then every 5s for
// as long as the write fails), as a flush barrier of everything received,
// telling the owner Retrying. A flush, a checkpoint or the write-behind
// window may retry sooner. The first write that succeeds (it carries the
// failed events) is reported as Durable and ends the retries; untracking or
// stopping the persister stops them too. A write refused because another
// writer owns the session (ErrFenced, ErrLocked), because the stored log is
// corrupt or because the store is closed is not retried in the background:
// no retry would succeed. An Untrack is answered only after Store.Release
// (run on the pool, like every store call) returned; a failed drain releases
// nothing, and a failed release answers FlushFailed with its error. Either
// way the session stays tracked and a later Untrack tries again.
//
// # Concurrency and ownership
//
// Stores are safe for concurrent use; operations on one session id are
// serialised. A Store copies the event slices it is given (the caller keeps
// ownership) and hands out slices the caller owns; the session.Event values
// themselves are immutable and shared freely. The actor's state is touched
// only inside Receive; store I/O runs off the actor's goroutine.
//
// # On-disk format
//
// The JSONL store keeps a session in
// <root>/<project>/<id>/session.jsonl.zstd (session.jsonl with
// JSONLConfig.Plain), with session.lock beside it when writers lock (see
// Writer fencing). docs/log-format.md#jsonl-files describes the lines, the
// zstd framing, and a torn tail as opposed to corruption; the comment at
// the top of jsonl.go tells how the store writes and reads them (the
// first append, barriers, repair, the memory a read costs).
//
// # SQLite store
//
// [SQLiteStore] keeps every session of a store in one SQLite database, in
// the reference's own SQLite format (schema 17), so that each opens the
// other's databases. It runs on a pure-Go SQLite (no C compiler needed).
//
// docs/log-format.md#sqlite-databases describes the tables and rows; the
// comment at the top of sqlite.go tells how the store opens, checks and
// writes a database (identity, schema check, group commit, its writer
// lock and what it refuses).
//
// # Writer fencing
//
// Several dsh processes may share one root: two dsh run or dsh chat on one
// data directory, an embedder's host beside them, cluster members (during
// a membership change two of them can activate the same session), a dsh
// log repair. They must never interleave writes, and the loser must fail
// loudly. Every writer dsh has locks: a supervisor.Host with a Dir (and
// so dsh run, dsh chat, dsh bench --dir), a cluster member, and
// RepairFile (dsh log repair), which takes the lock whether or not a lock
// file exists yet. The seq check
// alone cannot promise that across processes: it is check-then-act (both
// writers can read the same next seq, then both append), and a writer's
// truncate-back after a failed append could cut a frame the other wrote
// meanwhile. So a JSONLStore with JSONLConfig.Lock takes each session's
// writer lock:
//
//   - The lock is the file session.lock in the session's directory,
//     beside session.jsonl[.zstd]: <root>/<project>/<id>/session.lock. It
//     is taken (vfs.FS.Lock: an exclusive, non-blocking open-file-
//     description lock on Linux, flock elsewhere) before the session's
//     first write of any kind: the first Append (the one that publishes
//     the file included: the directory is created, then locked, then the
//     artifact looked for again) and Load (which may commit a repair, and
//     is how a writer resumes). The store holds it until Release(id) or
//     Close. Inspect, ReadFrom and List never lock: looking at a session
//     never fences its writer.
//   - Taking the lock drops what the store knew about the file (size,
//     next seq, the cached handle): the previous holder may have written,
//     so the file is read again through a new descriptor. While it holds
//     the lock, the store trusts what it knows (nobody else writes the
//     file) and appends without checking the file's size first; without
//     Lock every append checks it (an fstat), to notice another writer.
//   - A lock held by another writer fails the operation, changing
//     nothing, with a *LockedError (ErrLocked, and ErrFenced) that names
//     the holder: the text it wrote into the lock file (JSONLConfig.Holder,
//     default "pid <pid> on <hostname>"; a member's is "member <addr> pid
//     <pid> on <hostname>"). Its text is one line, "persister: session S
//     is in use by pid N on HOST", which dsh prints, without the package
//     prefix, as its one error line.
//   - The lock file holds nothing but the holder text while held, and
//     nothing once released (the holder empties it before it lets go, so
//     it never names a writer that is gone). It is never removed, not
//     even when the lock is released. Unlinking it would race: a process
//     that opened the old inode could lock it while a newcomer creates and locks a new file
//     under the same name, and both would believe they hold the lock. A
//     directory holding only session.lock (a first append that failed) is
//     not a session; nothing that lists or checks the root reads lock
//     files.
//   - The kernel drops a dead process's locks, so a crashed or killed
//     writer never leaves a session locked. Release leaves the file as
//     acknowledged before it lets go: what a failed append left behind is
//     removed first, and if that fails the lock is kept (fail closed).
//   - The seq check stays as a second line: an append whose first seq is
//     not the stored next seq is still a *FenceError, which catches a
//     writer with a stale view that took the lock after another released
//     it, and every writer of a root that does not lock.
//
// The persister actor releases a session when an Untrack has drained it,
// so a passivated or evicted session can be taken over by another
// process at once; resuming it takes the lock again.
//
// Capacity: each held lock keeps one file descriptor open, outside
// MaxOpenFiles, for as long as the session is resident (the lock is taken
// once, not per append). A process with R resident sessions so holds R
// lock descriptors plus at most MaxOpenFiles cached append handles (4096
// by default, or a quarter of the descriptor limit if less) plus its own;
// its descriptor limit (ulimit -n) must allow that, and passivation
// (supervisor.Config.IdleTimeout) is what bounds R.
// dsh bench reports the descriptors per resident session it measured.
//
// On a network file system the lock is only as good as the file system's
// locking. It must provide:
//
//   - Working byte-range (fcntl/OFD) locks honoured across clients: NFSv4,
//     or NFSv3 with lockd/statd running. Never mount with nolock or
//     local_lock=posix|all (local_lock=none, the default, is right): those
//     keep locks local to one client, so every member would get the lock.
//   - Close-to-open consistency (the NFS default): a new writer opens the
//     file after taking the lock and sees everything the old writer wrote
//     and closed (and fsynced: Release, which the persister calls before
//     it lets a session go, is a barrier).
//   - With NFSv4 leases, a member cut off from the server for longer than
//     the lease loses its lock, and another member may take the session.
//     The Linux client then fails the cut-off member's later I/O on that
//     file with EIO (it does not silently reclaim the lock); the store
//     reports that as a write failure, so the session fails closed rather
//     than writing over the new holder.
//
// Rejected alternative: a lease record in the log, or a lock file created
// with O_EXCL and removed on release. Both need a liveness protocol
// (timeouts, a stale-lock breaker) to survive a crashed writer, and both
// would change what the reference reads or leave stale state behind; a
// kernel lock dies with its process and the log header stays the
// reference's.
package persister
