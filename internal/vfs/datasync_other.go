//go:build !linux

package vfs

import "os"

// datasyncOS is f.Sync where fdatasync(2) is not used.
func datasyncOS(f *os.File) error { return f.Sync() }

// fsyncOS is f.Sync.
func fsyncOS(f *os.File) error { return f.Sync() }
