//go:build !unix

package vfs

import (
	"errors"
	"fmt"
	"os"
	"runtime"
)

// lockFile fails: file locks are implemented for Unix systems only.
func lockFile(*os.File) error {
	return fmt.Errorf("vfs: file locking is not supported on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}
