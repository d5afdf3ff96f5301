package vfs

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// lockFile takes an open-file-description (OFD) write lock of the whole
// file, without waiting: errLockHeld if another description holds a
// conflicting lock. An OFD lock belongs to the open file description, so
// it excludes other descriptions of the same process too, and it is
// released when the last descriptor of the description is closed, or the
// process dies. On NFS it is a byte-range lock the server (NFSv4, or lockd
// for NFSv3) arbitrates between clients.
//
// Rejected alternative: flock(2). Linux emulates it on NFS with a
// whole-file byte-range lock (and before 2.6.12 applied it locally only),
// so it buys nothing there, while on local file systems it does not
// conflict with byte-range locks: the OFD lock behaves the same on both.
func lockFile(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var lerr error
	err = rc.Control(func(fd uintptr) {
		lerr = unix.FcntlFlock(fd, unix.F_OFD_SETLK, &unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: 0, Len: 0})
	})
	if err != nil {
		return err
	}
	if errors.Is(lerr, unix.EAGAIN) || errors.Is(lerr, unix.EACCES) {
		return errLockHeld
	}
	return lerr
}
