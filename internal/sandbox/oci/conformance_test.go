package oci_test

import (
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox/conformance"
	"github.com/ironclaw/ironclaw/internal/sandbox/oci"
)

// The contract every backend meets, run against each OCI runtime this host
// has; a missing one is skipped with its reason (failed when
// IRONCLAW_REQUIRE_OCI names it).
func TestConformance(t *testing.T) {
	for _, name := range runtimeNames {
		t.Run(name, func(t *testing.T) {
			var opts conformance.Options
			if name == oci.Runsc {
				// gVisor's /proc/self/status has no CapAmb or NoNewPrivs
				// line (the other capability sets and Seccomp are there and
				// checked; TestSeal checks no_new_privs through prctl).
				opts.UnreportedStatus = []string{"CapAmb", "NoNewPrivs"}
			}
			conformance.Run(t, runtimeFor(t, name), opts)
		})
	}
}
