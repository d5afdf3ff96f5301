//go:build !race

package cluster

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// A graceful shutdown that sends on a channel an endpoint reader closed
// (protoactor's race between a leaving member and a peer gone at the same
// moment) ends in the kill instead of a panic; a shutdown that goes well
// never kills, and any other panic is not swallowed.
func TestStopRemoteRecoversTheEndpointReaderRace(t *testing.T) {
	killed := 0
	kill := func() { killed++ }

	closed := make(chan bool, 1)
	close(closed)
	require.NotPanics(t, func() { stopRemote(func() { closed <- true }, kill) })
	require.Equal(t, 1, killed, "the remote is killed after the recovered panic")

	stopRemote(func() {}, kill)
	require.Equal(t, 1, killed, "a shutdown that goes well is not followed by a kill")

	boom := errors.New("boom")
	require.PanicsWithError(t, "boom", func() { stopRemote(func() { panic(boom) }, kill) })
	var m map[string]int
	require.Panics(t, func() { stopRemote(func() { m["x"] = 1 }, kill) }, "another runtime error")
	require.Equal(t, 1, killed)
}
