package docker_test

import (
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox/conformance"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

// A gated program cannot run without an approval, however it is spelled;
// an approved exec runs exactly its argv as the real program, started by
// the agent, and nothing else in the container can copy it while it runs.
func TestHostileExecGate(t *testing.T) {
	conformance.RunGate(t, sandboxtest.Docker(t))
}
