//go:build !invariants && !race

package invariants

// Enabled reports whether assertions panic. It is false in this build; build
// with -tags invariants or -race to turn it on.
const Enabled = false
