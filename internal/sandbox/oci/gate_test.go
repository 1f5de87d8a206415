package oci_test

import (
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox/conformance"
)

// A gated program cannot run without an approval, however it is spelled;
// an approved exec runs exactly its argv as the real program, started by
// the agent, and nothing else in the sandbox can copy it while it runs.
func TestHostileExecGate(t *testing.T) {
	for _, name := range runtimeNames {
		t.Run(name, func(t *testing.T) {
			conformance.RunGate(t, runtimeFor(t, name), conformance.Options{})
		})
	}
}
