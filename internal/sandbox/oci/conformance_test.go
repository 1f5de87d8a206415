package oci_test

import (
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox/conformance"
	"github.com/ironclaw/ironclaw/internal/sandbox/oci"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// The contract every backend meets, run against each OCI runtime this host
// has; a missing one is skipped with its reason (failed when
// IRONCLAW_REQUIRE_OCI names it).
func TestConformance(t *testing.T) {
	sandboxtest.EachOCI(t, func(t *testing.T, r *oci.Runtime) { conformance.Run(t, r, conformanceOptions(r.Name())) })
}

// The attacks and faults every backend withstands, on each OCI runtime.
func TestHostileConformance(t *testing.T) {
	sandboxtest.EachOCI(t, func(t *testing.T, r *oci.Runtime) { conformance.RunHostile(t, r, conformanceOptions(r.Name())) })
}

func conformanceOptions(name string) conformance.Options {
	opts := conformance.Options{
		// runc and crun mount the v1 cgroup view on a tmpfs they
		// leave writable by root, gVisor its cgroupfs.
		RootCgroupMounts: true,
		SealProbe:        []string{wire.HelperPath, wire.ModeProbe},
		// On runc and crun, pid 1 is the agent; on runsc the
		// sandbox process, with the sentry and every process in it.
		KillInit: sandboxtest.KillInit,
	}
	if name == oci.Runsc {
		// gVisor's /proc/self/status has no CapAmb or NoNewPrivs
		// line (the other capability sets and Seccomp are there and
		// checked; SealProbe checks no_new_privs through prctl).
		opts.UnreportedStatus = []string{"CapAmb", "NoNewPrivs"}
		// The daemon, not the kernel's OOM killer, chooses what
		// dies inside a gVisor sandbox (never pid 1).
		opts.NoOOMScore = true
	}
	return opts
}
