//go:build !race

package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/cluster/clusterpb"
	"github.com/dshgo/dsh/internal/testutil"
	"github.com/dshgo/dsh/supervisor"
)

func TestClusterConfigValidate(t *testing.T) {
	require.NoError(t, Config{Dir: "/d"}.Validate())
	require.NoError(t, Config{Dir: "/d", Bind: "10.0.0.5", Port: 7000, ProviderPort: 6330, Peers: []string{"10.0.0.6:6330"}, Insecure: true}.Validate())
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

// Without TLS a member binds only a loopback address, unless Insecure;
// with TLS the configuration must authenticate both ways.
func TestClusterConfigPlaintextOnlyOnLoopback(t *testing.T) {
	ca := testutil.NewCA(t, "dsh test CA")
	mtls := testutil.TLSConfig(t, ca, ca, "member")
	for _, bind := range []string{"", "127.0.0.1", "127.0.0.2", "::1", "localhost"} {
		require.NoError(t, Config{Dir: "/d", Bind: bind}.Validate(), bind)
	}
	for _, bind := range []string{"10.0.0.5", "192.168.1.2", "fd00::1", "dsh.example"} {
		err := Config{Dir: "/d", Bind: bind}.Validate()
		require.ErrorIs(t, err, ErrInsecure, bind)
		require.ErrorContains(t, err, "Bind "+bind+": ")
		require.ErrorContains(t, err, "give TLS settings, or set Insecure")
		require.NotContains(t, err.Error(), "\n")
		require.NoError(t, Config{Dir: "/d", Bind: bind, Insecure: true}.Validate(), bind)
		require.NoError(t, Config{Dir: "/d", Bind: bind, TLS: mtls}.Validate(), bind)
	}
	_, err := Start(Config{Dir: t.TempDir(), Bind: "10.0.0.5"})
	require.ErrorIs(t, err, ErrInsecure)
	_, err = Dial(context.Background(), ClientConfig{Bind: "10.0.0.5", Peers: []string{"10.0.0.6:6330"}})
	require.ErrorIs(t, err, ErrInsecure)

	noCA := mtls.Clone()
	noCA.RootCAs, noCA.ClientCAs = nil, nil
	require.ErrorContains(t, Config{Dir: "/d", TLS: noCA}.Validate(), "TLS has no CA")
	noCert := mtls.Clone()
	noCert.Certificates = nil
	require.ErrorContains(t, Config{Dir: "/d", TLS: noCert}.Validate(), "TLS has no certificate")
	skip := mtls.Clone()
	skip.InsecureSkipVerify = true
	require.ErrorContains(t, Config{Dir: "/d", TLS: skip}.Validate(), "skips verification")
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
