package vfs

import (
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLockFailureNamesTheFileOnce: when writing the holder text fails
// after the lock is taken (here: a device that cannot be truncated), the
// error names the file once, as the operation that failed.
func TestLockFailureNamesTheFileOnce(t *testing.T) {
	const dev = "/dev/full"
	_, err := OS().Lock(dev, []byte("holder"))
	require.Error(t, err)
	var pe *fs.PathError
	require.True(t, errors.As(err, &pe))
	require.Equal(t, 1, strings.Count(err.Error(), dev), "%v", err)
	require.Equal(t, "truncate "+dev+": invalid argument", err.Error())
}
