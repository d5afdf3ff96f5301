//go:build !linux

package persister

import (
	"os"
	"syscall"
)

// fileIdentity returns the device, inode and birth time (ns; 0 where the
// system does not say) of the file at path, for the store identity.
func fileIdentity(path string) (dev, ino uint64, birthNs int64, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, 0, err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), uint64(st.Ino), 0, nil
	}
	return 0, 0, fi.ModTime().UnixNano(), nil
}
