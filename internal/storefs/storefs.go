// Package storefs opens a persister store on a file system other than the
// operating system's: an in-memory one that injects faults and simulates
// crashes (vfs.MemFS), or one a test can kill (vfs.KillableFS). It is for
// this module's tests and its cluster member. The persister's exported
// API does not offer it, because vfs is internal and so cannot appear in
// an exported signature.
package storefs

import (
	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/internal/storefs/hook"
	"github.com/dshgo/dsh/internal/vfs"
)

// NewJSONLStore is persister.NewJSONLStore writing through fsys.
func NewJSONLStore(cfg persister.JSONLConfig, fsys vfs.FS) (*persister.JSONLStore, error) {
	s, err := hook.NewJSONL(cfg, fsys)
	if err != nil {
		return nil, err
	}
	return s.(*persister.JSONLStore), nil
}
