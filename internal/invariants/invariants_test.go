package invariants

import (
	"errors"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

// These tests use only the standard library: the module's go.sum does not yet
// carry testify's transitive requirements, and this package must build before
// any other does.

func TestAssertfTrueReturnsNil(t *testing.T) {
	// A true condition never panics and never builds an error, whatever the
	// build mode.
	if err := Assertf(true, "unused %d", 1); err != nil {
		t.Fatalf("Assertf(true) = %v, want nil", err)
	}
}

func TestAssertfFalse(t *testing.T) {
	const (
		wantMsg = "seq 3 after 5"
		wantErr = "invariants: assertion failed: seq 3 after 5"
	)

	// assertFalse runs Assertf(false, ...) and reports what came out of it:
	// the recovered panic value and the returned error, at most one non-nil.
	assertFalse := func() (panicked any, err error) {
		defer func() { panicked = recover() }()
		return nil, Assertf(false, "seq %d after %d", 3, 5)
	}
	panicked, err := assertFalse()

	var aerr *AssertionError
	if Enabled {
		// -tags invariants or -race: the assertion must panic with an
		// *AssertionError and never return.
		if panicked == nil {
			t.Fatalf("Enabled build: Assertf(false) returned %v, want a panic", err)
		}
		var ok bool
		aerr, ok = panicked.(*AssertionError)
		if !ok {
			t.Fatalf("Enabled build: panic value is %T (%v), want *AssertionError", panicked, panicked)
		}
	} else {
		// Default build: the assertion returns the error and must not panic.
		if panicked != nil {
			t.Fatalf("default build: Assertf(false) panicked with %v, want a returned error", panicked)
		}
		if !errors.As(err, &aerr) {
			t.Fatalf("default build: Assertf(false) = %T (%v), want *AssertionError", err, err)
		}
	}

	if got := aerr.Error(); got != wantErr {
		t.Errorf("Error() = %q, want %q", got, wantErr)
	}
	if got := aerr.Message(); got != wantMsg {
		t.Errorf("Message() = %q, want %q", got, wantMsg)
	}
}

// TestEnabledMatchesBuild pins Enabled to the flags the test binary was built
// with, read back from its embedded build settings, so that a mistake in the
// //go:build lines of enabled_on.go / enabled_off.go shows up here rather than
// as assertions that silently never fire in CI.
func TestEnabledMatchesBuild(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("the test binary carries no build info (go test always embeds it)")
	}
	var race, tagged bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "-race":
			race = s.Value == "true"
		case "-tags":
			tagged = slices.Contains(strings.Split(s.Value, ","), "invariants")
		}
	}
	if want := race || tagged; Enabled != want {
		t.Fatalf("Enabled = %v, want %v (-race %v, -tags invariants %v)", Enabled, want, race, tagged)
	}
}

func TestAssertionErrorIsError(t *testing.T) {
	var err error = &AssertionError{msg: "x"}
	if got, want := err.Error(), "invariants: assertion failed: x"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}
