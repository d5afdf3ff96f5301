package vfs

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them. A
// child process started by TestLockAcrossProcesses runs only its own test,
// and is killed before it could report.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
