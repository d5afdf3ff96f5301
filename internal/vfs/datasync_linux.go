package vfs

import (
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// datasyncOS calls fdatasync(2) on f, retrying on EINTR as os.File.Sync
// does. The descriptor is reached through SyscallConn, which keeps f's
// own bookkeeping (unlike Fd, it does not switch f to blocking mode).
func datasyncOS(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = unix.Fdatasync(int(fd))
			if !errors.Is(serr, unix.EINTR) {
				return
			}
		}
	}); err != nil {
		return &fs.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
	}
	if serr != nil {
		return &fs.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return nil
}
