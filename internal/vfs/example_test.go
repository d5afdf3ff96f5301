package vfs_test

import (
	"fmt"
	"io"
	"os"

	"github.com/dshgo/dsh/internal/vfs"
)

// A crash-safety test writes through a MemFS, then opens its crash clone:
// the file system as a power loss would leave it, holding what was synced
// and nothing written after the last sync.
func ExampleMemFS_CrashClone() {
	m := vfs.NewMem()
	if err := m.MkdirAll("/data", 0o700); err != nil {
		panic(err)
	}
	f, err := m.OpenFile("/data/log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("synced\n")); err != nil {
		panic(err)
	}
	// The file's data, then its entry in /data and /data's entry in /,
	// made durable: a crash keeps a file only if every directory on its
	// path was synced after the entry was made.
	if err := f.Sync(); err != nil {
		panic(err)
	}
	for _, dir := range []string{"/data", "/"} {
		if err := m.SyncDir(dir); err != nil {
			panic(err)
		}
	}
	if _, err := f.Write([]byte("written, not synced\n")); err != nil {
		panic(err)
	}

	crashed := m.CrashClone()
	g, err := crashed.OpenFile("/data/log", os.O_RDONLY, 0)
	if err != nil {
		panic(err)
	}
	defer g.Close()
	b, err := io.ReadAll(g)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%q\n", b)
	// Output: "synced\n"
}
