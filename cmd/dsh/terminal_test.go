package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDevNullAndBuffersAreNotTerminals(t *testing.T) {
	f, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	require.False(t, isTerminal(f), "/dev/null is a character device, not a terminal")
	require.False(t, isTerminal(&bytes.Buffer{}))
	require.False(t, isTerminal(nil))
	require.False(t, dimmed(f))
}

func TestNoColorTurnsDimmingOff(t *testing.T) {
	require.True(t, colorAllowed(true, ""))
	require.False(t, colorAllowed(true, "1"), "NO_COLOR set: no colour")
	require.False(t, colorAllowed(true, "0"), "any non-empty NO_COLOR counts")
	require.False(t, colorAllowed(false, ""), "never off a terminal")
}
