package docker_test

import (
	"errors"
	"syscall"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/conformance"
	"github.com/ironclaw/ironclaw/internal/sandbox/docker"
)

// The contract every backend meets, run against Docker (on gVisor when
// IRONCLAW_DOCKER_RUNTIME=runsc, whose /proc reports fewer status fields).
func TestConformance(t *testing.T) {
	conformance.Run(t, runtimeFor(t), conformanceOptions())
}

// The attacks and faults every backend withstands, on Docker.
func TestHostileConformance(t *testing.T) {
	conformance.RunHostile(t, runtimeFor(t), conformanceOptions())
}

func conformanceOptions() conformance.Options {
	opts := conformance.Options{
		// dockerd's runc mounts the v1 cgroup view on a tmpfs it leaves
		// writable by root.
		RootCgroupMounts: true,
		// dockerd starts every exec in the container's own cgroup: the
		// agent shares the pids limit with the workload.
		InitMayDie: true,
		KillInit: func(sb sandbox.Sandbox) error {
			pid := sb.(*docker.Sandbox).InitPid()
			if pid <= 0 {
				return errors.New("the container's pid 1 is unknown")
			}
			return syscall.Kill(pid, syscall.SIGKILL)
		},
	}
	if runsc() {
		opts.UnreportedStatus = []string{"CapAmb", "NoNewPrivs"}
		opts.NoOOMScore = true
	}
	return opts
}
