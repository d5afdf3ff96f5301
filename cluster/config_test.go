//go:build !race

package cluster

import (
	"testing"

	"github.com/stretchr/testify/require"
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
