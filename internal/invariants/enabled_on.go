//go:build invariants || race

package invariants

// Enabled reports whether assertions panic. It is true in this build because
// it was made with -tags invariants or -race.
const Enabled = true
