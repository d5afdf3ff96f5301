// Package persister makes session logs durable: the Store where logs live
// (an in-memory MemStore, the JSONL store on disk and the SQLite store)
// and the persister actor that writes a session's committed events behind
// it.
//
// [Open] names a store by URL, as the command line does: jsonl:DIR (a bare
// DIR is the same) or sqlite:PATH; [OpenReader] opens one for reading
// only, taking no writer lock and repairing nothing (open.go).
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
//     the winner's events stand. Without durable the events are written
//     (committed: every reader sees them) but not yet durable. With
//     durable the call is a barrier: when it returns nil, its events and
//     every event appended before them are durable. An empty durable
//     Append is a barrier alone. A session's first Append carries the
//     header with the batch; without durable neither is durable yet (a
//     store may make them so all the same), and a crash may lose the
//     session whole. A failed
//     Append (any error) leaves the log at its last durable event: the
//     batch, and what was appended without durable since the last
//     barrier, are gone, and the caller appends them again. The flag
//     rather than a separate Sync call is what lets a store group the
//     barriers of many sessions (one transaction in a database store) and
//     fold a pending batch into the barrier's write.
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
// Writes of all sessions share a bounded pool of FsyncWorkers goroutines;
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
// Format version 0 (layout.go has the directory layout:
// <root>/<projectKey(cwd)>/<encodeSegment(id)>/session.jsonl[.zstd],
// with session.lock beside it when writers lock; see Writer fencing).
// A log is logical lines, each ending in "\n":
//
//	line 1     {"type":"session","version":0,"id":...,"createdAt":...,
//	            "cwd"?,"parentSession"?,"seedLength"?,"origin"?,
//	            "delegationDepth":...,"agentPreset"?}
//	line 2..   one storage record each: a session event as JSON
//	           {"seq","time","type","data",...}, or a packed chunk row
//	           standing for a run of ≥3 chunk events of one batch
//	           (docs/log-format.md#packed-chunk-rows)
//
// session.jsonl holds the lines as they are. session.jsonl.zstd (the
// default) holds them in independent zstd frames, each with a content
// checksum, so a reader can tell a frame cut short from a damaged one:
//
//	offset 0                                                          EOF
//	+--------------+----------------+----------------+-----+----------------+
//	| frame 0      | frame 1        | frame 2        | ... | frame n        |
//	| header line  | batch 1 lines  | batch 2 lines  |     | batch n lines  |
//	+--------------+----------------+----------------+-----+----------------+
//	frame = 28 B5 2F FD | frame header | blocks | xxhash64 checksum (4 bytes)
//
// Frame 0 holds exactly the header line; each later frame is one append
// batch (one Append, or one repair), decoding to whole lines.
// Recovery: a final frame (plain: a final line) cut short by a crash is a
// torn tail, as is damage after the last turn/end; Load truncates it (the
// zstd truncation point is the start of the torn frame; the complete
// records decoded from that frame are re-appended) and closes an open
// turn. Damage followed by a turn/end is corruption and is reported,
// never repaired.
//
// Write path. The first append of a session creates the artifact under
// its name (O_EXCL: two writers cannot both create it) and writes the
// header and the first batch in one write; a durable one then fdatasyncs
// it and fsyncs its directory, one without durable leaves both to the
// session's next barrier (which fsyncs the file, then the directory), so
// a new session's first write-behind batch costs no fsync. The
// directory's own entry in the project directory is made durable before,
// by a fsync of the project directory that the first appends of
// concurrent new sessions share (one running, the next one covering every
// append that waited for it). The descriptor stays open as the session's
// append handle. A failed append before that first barrier removes the
// artifact (nothing of it was durable), and the session is back to
// registered: its events are appended again from seq 0. A crash before
// the directory fsync leaves no artifact, or, on a file system that made
// the name durable before the data, an artifact that ends inside its
// header (empty, most often): a torn creation. It stores nothing: List skips it, reads find
// no session, and the next first append of the id removes it and creates
// the artifact again (under the writer lock, so no live writer is in the
// middle of creating it). A crash after the header leaves a log with a
// torn tail, like any unsynced append; neither was acknowledged. A first
// append that fails unlinks what it created. Later appends write one
// encoded batch (one checksummed zstd frame, or the plain lines) at the
// end, and a durable one then fdatasyncs the file. The store tracks the
// file's size at its last
// fsync; a cached handle evicted (or a session's handle closed) with
// bytes unsynced loses nothing, since the next barrier's fsync, through a
// new descriptor, covers them. A failed append truncates the file back to
// the last synced size (through a new descriptor) and fsyncs, so a retry
// cannot store a seq twice. Bytes once acknowledged durable are never
// rewritten; the only rewrites are crash repair truncating a tail that was
// never acknowledged durable and a failed append cutting back what was
// written since the last fsync.
//
// Read path. Load and Inspect (and RepairFile) stream the file through
// session.Read and apply its scan rules: a torn tail (a final record
// without newline, a final zstd frame cut short, damage after the last
// turn/end) is dropped, damage before the last turn/end is corruption.
// Load commits crash repair: it truncates the torn tail and appends, as
// one batch, the complete records recovered from a torn zstd frame plus
// the closers of session.InterruptedTurnClosers. List reads only each
// file's header.
//
// Memory. Reading a log costs its events plus a bound, never the file's
// size nor its decompressed size: a plain file is streamed, each zstd
// frame is decoded as a stream with a window of at most 16 MiB (whatever
// its header asks for), an empty line costs nothing, and one line (the
// header or a record) may be at most JSONLConfig.MaxRecordBytes long,
// session.DefaultMaxRecordBytes (16 MiB) by default, the most dsh ever
// writes on one line (its packed rows stay under 1 MiB, and the session
// refuses a longer event at append; see session's doc.go). A longer
// line makes the log corrupt (a *session.CorruptError wrapping a
// *session.RecordTooLargeError that names the limit), never repaired.
// So a file of a few kilobytes that decompresses to a hundred MiB of
// newlines loads in a few MiB (see session's doc.go).
//
// Rejected alternative for the first append: publishing the file whole,
// through a temp file fsynced and then hard-linked to the artifact's name.
// No crash could leave a torn creation, but each new session would pay a
// file create, a fsync, a link and an unlink on top, and a fsync of the
// project directory of its own: about a seventh of the CPU of a run of
// short turns over many new sessions.
//
// Rejected alternative: rewriting the file through a temp file on every
// append (atomic, simple to reason about) copies the whole log per append
// and rewrites acknowledged bytes; appending plus truncate-on-failure is
// what the reference does and what an append-only log is for.
//
// # SQLite store
//
// [SQLiteStore] keeps every session of a store in one SQLite database, in
// the reference's own SQLite format (schema 17), so that each opens the
// other's databases. It runs on a pure-Go SQLite (no C compiler needed).
//
// Identity: application_id 0x44534850 ("DSHP"), user_version 17, one row
// in persistence_state holding a random UUID store_id. The schema is three
// STRICT tables, created with the reference's DDL text (sqlite_open.go)
// and nothing else: a reader compares every schema object's CREATE text
// (whitespace runs folded) with that DDL, at open and at the start of
// every mutating transaction, and refuses any difference (an index, a
// column, a keyword's case). Every open sets busy_timeout (default 5 s),
// trusted_schema OFF, mmap_size 0 and foreign_keys ON; a writer then runs
// the ownership transaction (BEGIN IMMEDIATE: initialize a pristine file,
// refuse an incompatible one), selects the journal mode (default wal,
// retrying SQLITE_BUSY within the busy timeout) and synchronous=FULL.
//
//	sessions  one row per materialized session: the header's fields
//	          (NULL when absent), a UUID incarnation minted when the row is
//	          inserted, and revision, bumped by every committed append or
//	          repair. The revision token is
//	          file:<dev>:<ino>:<birthNs>:store:<store_id>:incarnation:<uuid>:revision:<n>
//	events    (session_id, seq) primary key; a scalar row is one event
//	          (type, seq, time, data, source_event_seqs, surface_op,
//	          ignorable 1 or NULL); a packed row (ignorable 0, type
//	          text-chunks, reasoning-chunks or tool-call-chunks) is a run of
//	          3..1024 chunk deltas of one append batch, seq and time of its
//	          first member, data {"turn","step","index","dt":[gaps],
//	          "texts":[...]} (tool calls: "id", "name" when every member
//	          has one, "args"), at most 1 MiB uncompressed
//
// data is the event's JSON text: TEXT under 4 KiB; from 4 KiB a zstd frame
// (level 3, no checksum) stored as a BLOB when it is strictly shorter, else
// TEXT. source_event_seqs is NULL without the field, else a BLOB of
// varints: the first seq unsigned LEB128, each later one the ZigZag varint
// of its difference to the previous (an empty list is a zero-length BLOB).
// surface_op is the op's JSON text. A packed row's run is cut greedily: 1024
// members, or the most (at least 3) whose payload fits 1 MiB; what is left
// shorter than 3 stays scalar. Runs never cross append batches, and rows
// once written are never rewritten by an append.
//
// Append is one transaction (BEGIN IMMEDIATE ... COMMIT, synchronous=FULL,
// so every append is durable when it returns): the ownership checks, the
// tail check (the older of the last two rows, widened back to a packed row
// covering it, must decode and be gapless; the batch must start at the
// stored next seq, else a *FenceError), the session row on a first append,
// the rows, the revision bump. Reads run in a read transaction. A read
// from seq k anchors at a packed row covering k (or one that does not
// decode, so that a corrupt row fails the read instead of being skipped).
// Recovery scans a session's rows as the JSONL reader scans lines: a row
// that does not decode or does not continue the seqs, followed by a row
// holding a turn/end, is corruption (never repaired); after the last such
// row it starts a torn tail (SQLite commits are atomic, so only a foreign
// writer or a hand edit makes one), which Load deletes in its repair
// transaction (checking the tail is still the one it read), inserting the
// closers of an open turn as scalar rows. A packed row is all or nothing.
//
// Group commit (sqlite_group.go): the store implements the persister's
// group writes, so the
// persister writes it a group at a time: one transaction holds every
// session's write that was due while the previous commit ran, each
// session's append (tail check, rows, revision) in its own SAVEPOINT, and
// one COMMIT syncs them all (FULL when any write in it is a barrier or a
// first append, else NORMAL, as for one Append). A session refused inside the group (its
// fence, its checks) is rolled back to its savepoint and fails alone; a
// failed transaction fails every session in it. The writer connection
// never checkpoints on commit (wal_autocheckpoint 0): a goroutine with its
// own connection runs PASSIVE checkpoints once the WAL passes 4 MiB, and
// Close checkpoints with TRUNCATE.
//
// A writer holds the kernel lock of PATH.lock (the same kind as a JSONL
// session.lock) for its lifetime: a second dsh writer is refused at once,
// naming the holder (*DatabaseLockedError). Other SQLite clients (the
// reference) are fenced by SQLite's locking within the busy timeout, then
// by the tail check. A ReadOnly store takes no lock. OpenSQLite refuses,
// with one line and changing nothing (*DatabaseError, ErrIncompatible): a
// file that is not SQLite, another application's database, another schema
// version, changed schema objects, a missing or invalid store identity, a
// symbolic link or a non-regular file, a file with any group or other
// permission or not owned by the user, a parent directory that is a
// symbolic link, group- or world-writable or not the user's.
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
//     so the file is read again through a new descriptor.
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
// lock descriptors plus at most MaxOpenFiles cached append handles (256
// by default) plus its own; its descriptor limit (ulimit -n) must allow
// that, and passivation (supervisor.Config.IdleTimeout) is what bounds R.
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
