//go:build !race

package cluster

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/cluster/clusterpb"
	"github.com/dshgo/dsh/supervisor"
)

func TestClusterConfigValidate(t *testing.T) {
	require.NoError(t, Config{Dir: "/d"}.Validate())
	require.NoError(t, Config{Dir: "/d", Bind: "10.0.0.5", Port: 7000, ProviderPort: 6330, Peers: []string{"10.0.0.6:6330"}}.Validate())
	for name, c := range map[string]Config{
		"no dir":        {},
		"any address":   {Dir: "/d", Bind: "0.0.0.0"},
		"any address 6": {Dir: "/d", Bind: "::"},
		"port":          {Dir: "/d", Port: 70000},
		"provider port": {Dir: "/d", ProviderPort: -1},
		"peer":          {Dir: "/d", Peers: []string{"no-port"}},
		"refresh":       {Dir: "/d", Refresh: -1},
	} {
		require.Error(t, c.Validate(), name)
	}
	_, err := Start(Config{Dir: "/d", Bind: "0.0.0.0"})
	require.ErrorContains(t, err, "give one they can reach")
}

// Every error a grain classifies comes back from a RemoteError as the
// same error value (errors.Is holds across members), and every code
// round-trips.
func TestClusterErrorCodesRoundTrip(t *testing.T) {
	seen := map[clusterpb.Code]bool{}
	for _, c := range codes {
		require.False(t, seen[c.code], "one entry per code: %v", c.code)
		seen[c.code] = true
		wrapped := fmt.Errorf("on the member: %w", c.err)
		require.Equal(t, c.code, codeOf(wrapped), "%v", c.err)
		require.ErrorIs(t, &RemoteError{Code: codeOf(wrapped)}, c.err)
		for _, e := range c.also {
			require.Equal(t, c.code, codeOf(fmt.Errorf("x: %w", e)), "%v", e)
		}
	}
	require.Equal(t, clusterpb.Code_CODE_OK, codeOf(nil))
	require.Equal(t, clusterpb.Code_CODE_INTERNAL, codeOf(errors.New("something else")))
	require.NoError(t, (&RemoteError{Code: clusterpb.Code_CODE_INTERNAL}).Unwrap())
	// A write fenced off by another member fails the session closed; it
	// still reads as LOCKED, so the caller retries elsewhere.
	require.Equal(t, clusterpb.Code_CODE_LOCKED, codeOf(fmt.Errorf("%w: %w", supervisor.ErrNotDurable, &persister.LockedError{ID: "s"})))
}
