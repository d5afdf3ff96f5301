//go:build unix && !linux

package vfs

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// lockFile takes an exclusive flock(2) of the file, without waiting:
// errLockHeld if another open file description holds it. Like Linux's OFD
// locks, flock locks belong to the open file description, so they exclude
// other descriptions of the same process too, and are released when it is
// closed or the process dies.
func lockFile(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var lerr error
	err = rc.Control(func(fd uintptr) {
		lerr = unix.Flock(int(fd), unix.LOCK_EX|unix.LOCK_NB)
	})
	if err != nil {
		return err
	}
	if errors.Is(lerr, unix.EWOULDBLOCK) || errors.Is(lerr, unix.EAGAIN) {
		return errLockHeld
	}
	return lerr
}
