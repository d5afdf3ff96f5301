package telemetry_test

import (
	"testing"

	"go.uber.org/goleak"
)

// A MeterProvider with an OTLP export runs the SDK's periodic reader: the
// tests shut every provider down.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
