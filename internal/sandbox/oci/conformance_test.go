package oci_test

import (
	"errors"
	"syscall"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/conformance"
	"github.com/ironclaw/ironclaw/internal/sandbox/oci"
)

// The contract every backend meets, run against each OCI runtime this host
// has; a missing one is skipped with its reason (failed when
// IRONCLAW_REQUIRE_OCI names it).
func TestConformance(t *testing.T) {
	for _, name := range runtimeNames {
		t.Run(name, func(t *testing.T) { conformance.Run(t, runtimeFor(t, name), conformanceOptions(name)) })
	}
}

// The attacks and faults every backend withstands, on each OCI runtime.
func TestHostileConformance(t *testing.T) {
	for _, name := range runtimeNames {
		t.Run(name, func(t *testing.T) { conformance.RunHostile(t, runtimeFor(t, name), conformanceOptions(name)) })
	}
}

func conformanceOptions(name string) conformance.Options {
	opts := conformance.Options{
		// runc and crun mount the v1 cgroup view on a tmpfs they
		// leave writable by root, gVisor its cgroupfs.
		RootCgroupMounts: true,
		// On runc and crun, pid 1 is the agent; on runsc the
		// sandbox process, with the sentry and every process in it.
		KillInit: func(sb sandbox.Sandbox) error {
			pid := sb.(*oci.Sandbox).InitPid()
			if pid <= 0 {
				return errors.New("the sandbox's pid 1 is unknown")
			}
			return syscall.Kill(pid, syscall.SIGKILL)
		},
	}
	if name == oci.Runsc {
		// gVisor's /proc/self/status has no CapAmb or NoNewPrivs
		// line (the other capability sets and Seccomp are there and
		// checked; TestSeal checks no_new_privs through prctl).
		opts.UnreportedStatus = []string{"CapAmb", "NoNewPrivs"}
		// The daemon, not the kernel's OOM killer, chooses what
		// dies inside a gVisor sandbox (never pid 1).
		opts.NoOOMScore = true
	}
	return opts
}
