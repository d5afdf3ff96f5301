//go:build !linux

package bench

import "time"

// threadCPU is 0 where a thread's own CPU time is not at hand: the load's
// CPU figure then includes the sampler's.
func threadCPU() time.Duration { return 0 }
