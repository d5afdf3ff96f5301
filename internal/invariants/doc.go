// Package invariants holds run-time assertions that are strict in testing
// builds and lenient in production builds, after pebble's internal/invariants
// and AssertionFailedf.
//
// # Purpose
//
// A broken invariant (a sequence number that goes backwards, a view whose
// length exceeds the log it was cut from) is a programming error. In CI we want
// such an error to stop the test at the line that noticed it, with a stack
// trace; in production we would rather return an error and let the actor's
// shell decide (reply with a failure, or panic so the supervisor restarts it)
// than take the whole process down on a check that may itself be wrong.
//
// # Build modes
//
// [Enabled] is true when the binary is built with -tags invariants or with
// -race (the go tool sets the race build tag under -race). CI runs the test
// suite both ways, so every assertion is exercised in panicking mode.
//
//	build flags            Enabled  Assertf(false, ...)
//	---------------------  -------  -------------------------------
//	(none)                 false    returns *AssertionError
//	-tags invariants       true     panics with *AssertionError
//	-race                  true     panics with *AssertionError
//
// # Concurrency
//
// Everything here is safe for concurrent use: [Assertf] touches no shared state.
//
// # Ownership
//
// [Assertf] formats its arguments eagerly into the message only when the
// condition is false; it keeps no reference to them afterwards.
package invariants
