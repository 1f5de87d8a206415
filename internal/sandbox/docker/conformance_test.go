package docker_test

import (
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox/conformance"
)

// The contract every backend meets, run against Docker (on gVisor when
// IRONCLAW_DOCKER_RUNTIME=runsc, whose /proc reports fewer status fields).
func TestConformance(t *testing.T) {
	opts := conformance.Options{}
	if runsc() {
		opts.UnreportedStatus = []string{"CapAmb", "NoNewPrivs"}
	}
	conformance.Run(t, runtimeFor(t), opts)
}
