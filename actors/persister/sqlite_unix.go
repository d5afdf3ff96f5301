//go:build unix

package persister

import (
	"io/fs"
	"os"
	"syscall"
)

// ownedByUs reports whether the file is owned by this process's user.
func ownedByUs(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || st.Uid == uint32(os.Getuid())
}
