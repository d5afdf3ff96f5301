//go:build !unix

package persister

// descriptorLimit is 0 (unknown) where there is no descriptor limit to
// read.
func descriptorLimit() uint64 { return 0 }
