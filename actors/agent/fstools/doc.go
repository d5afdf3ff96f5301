// Package fstools are dsh's read-only file tools, confined to a working
// directory: read_file, list_dir, glob and grep (agent.Tool values).
//
// Confinement: every path is taken relative to the workdir (an absolute
// path is accepted only when it lies inside it), must not climb out with
// "..", and is opened through an [os.Root], which refuses a symlink that
// resolves outside the workdir at open time (no check-then-open race). A
// refused or failed call is an error result (IsError, with a typed
// ToolError code) that the model sees; nothing panics. Directory walks
// (glob, grep) do not follow symlinked directories.
//
// Only regular files are read and only directories listed. A FIFO, a
// socket or a device is refused (NOT_A_FILE) without ever blocking: every
// open is non-blocking (O_NONBLOCK, and O_NOFOLLOW on each path component,
// which the root applies as it resolves symlinks itself), and the type is
// checked with fstat on the opened descriptor before any read, so a file
// swapped for a FIFO between a look and the open is refused all the same.
//
// Cancellation: every tool body checks its context between files,
// directory entries, lines and read chunks, and returns the context's
// error (which the agent records as ABORTED) soon after it is cancelled;
// memory per call is bounded (a line is kept up to 2,000 bytes, a listing
// up to 1,000 names, whatever the file or directory holds).
//
// The tools only read, so every call runs in agent.Parallel mode. A [Set]
// holds an open directory handle: Close it when done.
//
// # Using it
//
// [New] opens a Set over a workdir; its Tools go into the agent's
// registry (agent.NewRegistry), beside any others, and the agent runs
// them when the model calls them. Close the Set when the agents that use
// it are gone. Example reads a file and lists a directory through them.
package fstools
