package native_test

import (
	"syscall"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/conformance"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

var conformanceOptions = conformance.Options{
	TTY: true,
	KillInit: func(sb sandbox.Sandbox) error {
		return syscall.Kill(sb.(*native.Sandbox).InitPid(), syscall.SIGKILL)
	},
}

// The contract every backend meets, run against the native runtime.
func TestConformance(t *testing.T) {
	conformance.Run(t, sandboxtest.Native(t), conformanceOptions)
}

// The attacks and faults every backend withstands, on the native runtime.
func TestHostileConformance(t *testing.T) {
	conformance.RunHostile(t, sandboxtest.Native(t), conformanceOptions)
}
