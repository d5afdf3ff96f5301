// Package hook hands package persister's constructor of a JSONL store on a
// given file system to package storefs. Package persister sets NewJSONL
// when it is initialised; only storefs calls it. It is a package of its
// own because storefs imports persister, which so cannot import storefs.
package hook

import "github.com/dshgo/dsh/internal/vfs"

// NewJSONL opens a JSONL store writing through fsys: cfg is a
// persister.JSONLConfig, the store a *persister.JSONLStore (this package
// cannot name persister's types: persister imports it).
var NewJSONL func(cfg any, fsys vfs.FS) (store any, err error)
