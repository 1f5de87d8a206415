package native_test

import (
	"syscall"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/conformance"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
)

// The contract every backend meets, run against the native runtime.
func TestConformance(t *testing.T) {
	conformance.Run(t, runtimeFor(t), conformance.Options{
		KillInit: func(sb sandbox.Sandbox) error {
			return syscall.Kill(sb.(*native.Sandbox).InitPid(), syscall.SIGKILL)
		},
	})
}
