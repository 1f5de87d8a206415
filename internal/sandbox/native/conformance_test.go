package native_test

import (
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox/conformance"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

var conformanceOptions = conformance.Options{TTY: true, KillInit: sandboxtest.KillInit}

// The contract every backend meets, run against the native runtime.
func TestConformance(t *testing.T) {
	conformance.Run(t, sandboxtest.Native(t), conformanceOptions)
}

// The attacks and faults every backend withstands, on the native runtime.
func TestHostileConformance(t *testing.T) {
	conformance.RunHostile(t, sandboxtest.Native(t), conformanceOptions)
}
