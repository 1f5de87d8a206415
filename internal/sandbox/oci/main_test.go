package oci_test

import (
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// The test binary is also the in-sandbox helper: every sandbox binds it at
// wire.HelperPath, as the daemon binds itself, and sandboxtest.Main runs
// the helper's modes first. Started by that path with IRONCLAW_OCI_PROBE
// set (and no helper mode), it is a probe instead, trying one thing with
// exact system calls.
func TestMain(m *testing.M) {
	sandboxtest.Main(m, sandboxtest.Probe("IRONCLAW_OCI_PROBE", runProbe))
}

// probe runs the test binary's probe name inside b, through the helper's
// path (so the exec front starts it as any command).
func probe(b *sandboxtest.Box, name string, args ...string) sandboxtest.Output {
	b.T.Helper()
	return b.Run([]string{"IRONCLAW_OCI_PROBE=" + name}, append([]string{wire.HelperPath}, args...)...)
}
