package docker_test

import (
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox/conformance"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// The contract every backend meets, run against Docker (on gVisor when
// IRONCLAW_DOCKER_RUNTIME=runsc, whose /proc reports fewer status fields).
func TestConformance(t *testing.T) {
	conformance.Run(t, sandboxtest.Docker(t), conformanceOptions())
}

// The attacks and faults every backend withstands, on Docker.
func TestHostileConformance(t *testing.T) {
	conformance.RunHostile(t, sandboxtest.Docker(t), conformanceOptions())
}

func conformanceOptions() conformance.Options {
	opts := conformance.Options{
		// dockerd's runc mounts the v1 cgroup view on a tmpfs it leaves
		// writable by root.
		RootCgroupMounts: true,
		SealProbe:        []string{wire.HelperPath, wire.ModeProbe},
		// dockerd starts every exec in the container's own cgroup: the
		// agent shares the pids limit with the workload.
		InitMayDie: true,
		KillInit:   sandboxtest.KillInit,
	}
	if sandboxtest.DockerRuntime() == "runsc" {
		opts.UnreportedStatus = []string{"CapAmb", "NoNewPrivs"}
		opts.NoOOMScore = true
		// The sentry's memory is charged to the container's cgroup: the
		// host's OOM killer ends the whole sandbox.
		opts.OOMEndsSandbox = true
	}
	return opts
}
