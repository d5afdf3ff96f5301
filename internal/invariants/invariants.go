package invariants

import "fmt"

// AssertionError reports a violated invariant. It is the panic value of
// [Assertf] when [Enabled] is true and its returned error otherwise, so a
// recover or an errors.As check finds the same type in both build modes.
//
// An AssertionError is immutable once built and safe for concurrent use.
type AssertionError struct {
	msg string
}

// Error returns the assertion message, prefixed with "invariants: assertion
// failed: " so that it stands out in logs and panic output.
func (e *AssertionError) Error() string {
	return "invariants: assertion failed: " + e.msg
}

// Message returns the formatted message given to [Assertf], without the
// prefix that Error adds.
func (e *AssertionError) Message() string {
	return e.msg
}

// Assertf checks cond. When cond is true it returns nil. When cond is false it
// builds an *AssertionError from format and args (as fmt.Sprintf would) and
// then panics with it if [Enabled], or returns it otherwise.
//
// Callers must still handle the returned error: in a production build the
// assertion does not stop execution, and code that goes on as if the
// invariant held would compound the damage. The usual pattern is
//
//	if err := invariants.Assertf(seq > last, "seq %d after %d", seq, last); err != nil {
//		return err
//	}
//
// Assertf is safe for concurrent use.
func Assertf(cond bool, format string, args ...any) error {
	if cond {
		return nil
	}
	err := &AssertionError{msg: fmt.Sprintf(format, args...)}
	if Enabled {
		panic(err)
	}
	return err
}
