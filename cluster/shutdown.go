package cluster

import (
	"runtime"
	"strings"
)

// stopRemote runs stop, a graceful shutdown of protoactor's remote (its
// own, or the cluster's, which ends with it). That shutdown tells every
// endpoint reader that the member is leaving by sending on a channel the
// reader closes when its stream ends in an error; a peer that left at the
// same moment (members closing together, a peer killed) can have closed
// it, and the send panics with "send on closed channel" in the middle of
// a Close. That one panic is recovered here and the remote's server is
// stopped at once by kill instead of gracefully: this member is leaving
// anyway, and its peers see it gone as they would a closed connection.
// Any other panic goes on.
func stopRemote(stop, kill func()) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if err, ok := r.(runtime.Error); ok && strings.Contains(err.Error(), "send on closed channel") {
			kill()
			return
		}
		panic(r)
	}()
	stop()
}
