package bench

import (
	"syscall"
	"time"
)

// threadCPU is the calling thread's user+system CPU time (the caller has
// locked its goroutine to the thread).
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
