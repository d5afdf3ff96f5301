//go:build unix

package persister

import "syscall"

// descriptorLimit is the process's soft limit on open descriptors, 0 if
// unknown.
func descriptorLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur <= 0 {
		return 0
	}
	return uint64(l.Cur) // int64 on some systems
}
