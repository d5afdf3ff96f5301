package session

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTypeClassesFollowTheLists: the index the predicates read says of
// every name what the lists say, and nothing of other names.
func TestTypeClassesFollowTheLists(t *testing.T) {
	names := slices.Concat(knownTypes, coreTypes, legacyTypes, rowTags,
		[]EventType{"", "x/y", "turn/Start", "turn/start ", "assistant/chunks", "session"})
	for _, n := range names {
		require.Equal(t, slices.Contains(knownTypes, n), n.IsKnown(), n)
		require.Equal(t, slices.Contains(coreTypes, n), n.IsCore(), n)
		require.Equal(t, slices.Contains(legacyTypes, n), n.isLegacy(), n)
		require.Equal(t, slices.Contains(rowTags, n), n.isRowTag(), n)
		require.Equal(t, n.IsKnown() && !n.IsCore(), n.IsForeign(), n)
	}
	require.Len(t, knownTypes, 51)
	require.True(t, slices.IsSorted(knownTypes))
	for _, c := range coreTypes {
		require.True(t, c.IsKnown(), "core type %s is known", c)
	}
}
