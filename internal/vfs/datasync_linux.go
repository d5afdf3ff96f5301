package vfs

import (
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// datasyncOS calls fdatasync(2) on f, retrying on EINTR as os.File.Sync
// does: submitted to the kernel's AIO where it takes it (aio_linux.go),
// else as a system call. The descriptor is reached through SyscallConn,
// which keeps f's own bookkeeping (unlike Fd, it does not switch f to
// blocking mode).
func datasyncOS(f *os.File) error { return syncOS(f, true) }

// fsyncOS is f.Sync, submitted to the kernel's AIO where it takes it.
func fsyncOS(f *os.File) error { return syncOS(f, false) }

func syncOS(f *os.File, datasync bool) error {
	op, call := "fsync", unix.Fsync
	if datasync {
		op, call = "fdatasync", unix.Fdatasync
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		if taken, err := aioSync(fd, datasync); taken {
			serr = err
			return
		}
		for {
			serr = call(int(fd))
			if !errors.Is(serr, unix.EINTR) {
				return
			}
		}
	}); err != nil {
		return &fs.PathError{Op: op, Path: f.Name(), Err: err}
	}
	if serr != nil {
		return &fs.PathError{Op: op, Path: f.Name(), Err: serr}
	}
	return nil
}
