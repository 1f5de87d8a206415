package native_test

import (
	"os"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

// The test binary is four programs: the tests, the sandbox init (the
// runtime re-executes /proc/self/exe), a probe that tests bind into a
// sandbox at /probe to try escapes with exact system calls, and a daemon
// the crash tests kill.
func TestMain(m *testing.M) {
	sandboxtest.Main(m,
		sandboxtest.Probe("IRONCLAW_PROBE", runProbe),
		sandboxtest.Env("IRONCLAW_TEST_DAEMON", crashDaemon),
		sandboxtest.Env("IRONCLAW_TEST_EXHAUST", exhaustDaemon))
}

// probeBox is a sandbox of the shared runtime with the probe bound at
// /probe.
func probeBox(t testing.TB, spec sandbox.Spec) *sandboxtest.Box {
	t.Helper()
	r := sandboxtest.Native(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec.Mounts = append(spec.Mounts, sandbox.Mount{Source: exe, Target: "/probe", ReadOnly: true})
	return sandboxtest.New(t, r, spec)
}

// probe runs the test binary's probe name inside b.
func probe(b *sandboxtest.Box, name string, args ...string) sandboxtest.Output {
	b.T.Helper()
	return b.Run([]string{"IRONCLAW_PROBE=" + name}, append([]string{"/probe"}, args...)...)
}
