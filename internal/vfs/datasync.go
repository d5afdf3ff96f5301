package vfs

import "os"

// Datasync makes f's contents durable like File.Sync, with fdatasync(2)
// where the platform has it (Linux): it flushes the data and the metadata
// needed to read it back (the size), not the timestamps, which saves a
// journal write per call on most file systems. Elsewhere, and for files
// other than *os.File (MemFS, wrappers), it is f.Sync. On Linux the sync
// goes through the kernel's asynchronous I/O where the kernel takes it,
// so that the caller does not come back from a blocking system call
// (docs/performance.md#fsync-completions, aio_linux.go).
//
// Like fsync, it flushes the file (the inode), not only what was written
// through f: bytes written through another descriptor of the same file,
// closed since, are made durable too. The JSONL store relies on that when
// a barrier syncs through a handle opened after the one that wrote.
func Datasync(f File) error {
	if of, ok := f.(*os.File); ok {
		return datasyncOS(of)
	}
	return f.Sync()
}
