package persister

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them. Run
// with killChildEnv set, the binary is the kill test's child instead
// (kill_test.go).
func TestMain(m *testing.M) {
	if path := os.Getenv(killChildEnv); path != "" {
		os.Exit(runKillChild(path))
	}
	goleak.VerifyTestMain(m)
}
