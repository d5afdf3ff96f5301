package spans

import (
	"testing"

	"go.uber.org/goleak"
)

// An Exporter runs a goroutine (its hand-over) and the SDK's processor
// another: every test shuts them down.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
