// Package session is the session event log: the append-only, immutable
// record of one agent session from which everything a model ever sees is
// rebuilt, and the actor that owns it. docs/session-log.md describes the
// log (events, surface, derived messages, forks, crash repair) and
// docs/log-format.md its files, byte by byte.
//
// # Using it
//
// Build a log with [New] (a fresh session) or [NewSeeded] (a resume or a
// fork), append events with [Log.Append] as drafts built from the typed
// payloads ([TurnStart], [UserMessage], [AssistantChunk],
// [AssistantMessage], [ToolCall], [ToolResult], [TurnEnd], ... each has a
// Draft method), and read the messages a model sees next with
// [Log.DeriveMessages]. Read a file with [ReadFile] and rebuild its log
// with [Restore]; write one with [WriteFile]. Inside an actor system the
// session actor ([Props]) owns the log and the others talk to it with the
// messages of its protocol (below). The examples show a log built and
// refused a bad event, a file written and read back, and the actor.
//
// # The pure core
//
// [Log] holds the events and everything folded from them: the surface (the
// ordered seqs of model-visible events), the derived messages
// ([Log.DeriveMessages], incremental and O(1) to hand out), the folded
// request header and context. [Log.Append] and [Log.AppendBatch] validate
// before they commit (the envelope, the catalog, the surface and provenance
// rules, the typed shape of core events; with -tags invariants or -race also
// the trace invariants of [CheckTrace]) and change nothing on error.
// [NewSeeded] and [Restore] build a log from stored events; [Log.Fork] and
// [Log.ForkPrefix] fork it at an inclusive boundary outside an open turn;
// [InterruptedTurnClosers] is crash repair as a pure function. The core has
// no goroutines, no clock and no I/O: time comes in as an argument.
//
// The line format lives here too: [AppendEvent] and [DecodeEvent] for one
// event line, [AppendRecords] and [DecodeRecord] for batches with packed
// chunk rows, [ReadFile]/[Read]/[ParseFile] for a whole .jsonl or
// .jsonl.zstd file (its torn-tail and corruption rules), [WriteFile] for
// tests and tools.
//
// # Reading a file: bounded memory
//
// A file is read in one streaming pass, each line decoded as it arrives,
// so reading costs the events it returns plus a bounded amount, whatever
// the file holds: a plain file is never read whole; each zstd frame is
// decoded as a stream (never whole into memory) with a window of at most
// 16 MiB, whatever its header asks for; an empty line costs nothing (it
// does not parse, so it starts a torn tail, or is corruption when a
// turn/end follows, and the lines after it are only searched for a
// turn/end, keeping nothing); and one line (the header or a record) may
// be at most [ReadOptions].MaxRecordBytes long, [DefaultMaxRecordBytes]
// (16 MiB) by default. A longer complete line is corruption: a
// [*CorruptError] naming the file, the line and the seq, wrapping a
// [*RecordTooLargeError] naming the offset and the limit. The reader
// holds at most the limit of such a line, never the line. So a file of a
// few kilobytes that decompresses to a hundred MiB of newlines costs a
// few MiB to read, and a 50 MB line costs what a 17 MiB one does.
//
// The writer keeps to the same limit, so what dsh writes it can read
// back: a packed chunk row is at most 1 MiB (a longer run
// goes on in the next row), and [Log.Append] refuses an event whose
// record would be longer than [DefaultMaxRecordBytes] (a user message, a
// tool result, an assistant message of that size) with an [*EventError]
// wrapping a [*TooLargeError] (errors.Is [ErrTooLarge] and [ErrInvalid]),
// changing nothing. [CheckDraftSize] and [CheckMessageSize] tell a caller
// beforehand: Host and the cluster client refuse such a message at once
// (ErrTooLarge), and the agent turns such a tool result into an error
// result and such a model output into an ended turn (actors/agent/doc.go).
//
// # The actor
//
// The session actor ([Props]) is the only writer of its log. It answers to
// ctx.Sender():
//
//	message          reply                        effect
//	Append           AppendReply | AppendFailed   commits the drafts atomically
//	Subscribe        Subscribed                   sends EventsCommitted from a seq on (Behind: chunks a few at a time)
//	Unsubscribe      —                            ends a subscription
//	QueryMessages    MessagesReply                the derived messages
//	QueryEvents      EventsReply                  the events from a seq
//	QueryHeader      HeaderReply                  session header, folded request header/context
//	Fork             ForkReply | ForkFailed       the seed of a child session
//
// Committed events go, in order and after the commit point, first to the
// in-process observers of [Config] (synchronously; a failure or panic is
// contained and reported, and an observer cannot append: [ErrReentrantAppend]),
// then to subscribers as EventsCommitted, then the append is acknowledged.
// An Append made Delivering by a subscriber skips that subscriber's
// EventsCommitted: its AppendReply carries the events (Delivered).
// Nothing blocks inside Receive: every request is answered from memory.
//
// # Ownership and concurrency
//
// A Log is not safe for concurrent use; inside the actor it is touched only
// by Receive. Everything it hands out — [Event], [Events], [Messages], the
// payload values — is immutable and safe to share: views have a fixed
// length and never see later appends. Drafts and messages passed in are
// copied or immutable already.
//
// # Memory
//
// A log keeps its events in fixed pages of 128 (pages.go): no growth
// slack beyond the last page, nothing copied as it grows, and a loaded
// log copies each event once. An [Event] is 64 bytes; a streamed text or
// reasoning delta keeps only its text beside it (its turn, step and index
// shared with the other chunks of its step), and an assistant message or
// tool result appended from its typed value keeps no copy of its data
// beside the message it holds. [Event.Data] writes such data back, byte
// for byte (compact.go); [Event.DataLen] measures it without building it.
//
// # Errors and crashes
//
// A refused append is an expected failure: the actor replies AppendFailed
// with an error matching [ErrInvalid] (an [*EventError] or
// [*UnsupportedTypeError]). Reading a log reports [*CorruptError] for damage
// in its committed region or a line over the record limit, and
// [*FormatVersionError] for another format version; a torn tail is not an
// error but [File.Torn]. The actor panics only
// on a broken invariant of its own; the log is the truth and an append is
// atomic, so a restarted actor continues on the same log.
package session
