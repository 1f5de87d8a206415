package native_test

import (
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox/conformance"
)

// The contract every backend meets, run against the native runtime.
func TestConformance(t *testing.T) {
	conformance.Run(t, runtimeFor(t), conformance.Options{})
}
