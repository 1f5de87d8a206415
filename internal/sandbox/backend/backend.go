// Package backend opens a sandbox runtime by name. It is the one place that
// knows every backend, so the CLI and the daemon select one with a flag
// and everything above them sees only sandbox.Runtime.
package backend

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/docker"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/sandbox/oci"
)

// Names of the backends.
const (
	Native = "native"
	Runc   = oci.Runc
	Crun   = oci.Crun
	Runsc  = oci.Runsc
	Docker = "docker"
	// DockerRunsc is Docker with gVisor as its runtime (registered with
	// dockerd as "runsc").
	DockerRunsc = "docker-runsc"
)

// Names lists every backend name Open accepts.
func Names() []string { return []string{Native, Runc, Crun, Runsc, Docker, DockerRunsc} }

// Options configure Open. Fields a backend does not use are ignored.
type Options struct {
	// Name selects the backend; "" is Native.
	Name string
	// Exe is the binary the backend runs inside sandboxes (the native
	// init, the OCI helper); "" means InitExe's choice: the small
	// ironclaw-sandbox beside this executable, else this executable.
	Exe string
	// PoolSize, PoolExposedTCP and PoolGate configure the native warm pool.
	PoolSize       int
	PoolExposedTCP []uint16
	PoolGate       []string
	PoolTrust      string
	// SpareCgroups is native.Options.SpareCgroups: cgroups made ahead
	// for the creates the pool cannot serve.
	SpareCgroups int
	// SpareInits is native.Options.SpareInits: inits started ahead for
	// the same creates.
	SpareInits int
	// GoInit starts every native sandbox with the Go init rather than the
	// steward (native.Options.GoInit). The environment can ask for it
	// too, without a rebuild: IRONCLAW_SANDBOX_INIT=go ("" or "c": the
	// default).
	GoInit bool
	// StateDir holds the OCI backends' bundles and state; "" is their
	// default.
	StateDir string
	Logf     func(format string, args ...any)
}

// SandboxInitEnv names the environment variable that picks the native
// sandboxes' init (see Options.GoInit).
const SandboxInitEnv = "IRONCLAW_SANDBOX_INIT"

// Open starts the named backend. An unknown name is an error wrapping
// sandbox.ErrInvalidSpec; a backend this host cannot run returns an error
// wrapping sandbox.ErrUnsupported that says why.
func Open(ctx context.Context, opts Options) (sandbox.Runtime, error) {
	if opts.Exe == "" {
		exe, why := InitExe()
		if exe == "" && opts.Logf != nil {
			opts.Logf("sandbox init: re-executing this binary (slower start, more memory per sandbox): %s", why)
		}
		opts.Exe = exe
	}
	switch opts.Name {
	case "", Native:
		switch v := os.Getenv(SandboxInitEnv); v {
		case "", "c":
		case "go":
			opts.GoInit = true
		default:
			return nil, fmt.Errorf("%w: %s=%q: want go or c", sandbox.ErrInvalidSpec, SandboxInitEnv, v)
		}
		steward, why := StewardExe(opts.Exe)
		if steward == "" && opts.Logf != nil {
			opts.Logf("sandbox steward: idle sandboxes keep the Go init as pid 1 (more memory and threads each): %s", why)
		}
		return native.New(ctx, native.Options{PoolSize: opts.PoolSize, PoolExposedTCP: opts.PoolExposedTCP, PoolGate: opts.PoolGate, PoolTrust: opts.PoolTrust, SpareCgroups: opts.SpareCgroups, SpareInits: opts.SpareInits, Logf: opts.Logf, Exe: opts.Exe, Steward: steward, GoInit: opts.GoInit})
	case Runc, Crun, Runsc:
		return oci.New(ctx, oci.Options{Runtime: opts.Name, StateDir: opts.StateDir, Exe: opts.Exe, Logf: opts.Logf})
	case Docker:
		return docker.New(ctx, docker.Options{Exe: opts.Exe, Logf: opts.Logf})
	case DockerRunsc:
		return docker.New(ctx, docker.Options{Runtime: "runsc", Exe: opts.Exe, Logf: opts.Logf})
	}
	return nil, fmt.Errorf("%w: unknown runtime %q (want one of %s)", sandbox.ErrInvalidSpec, opts.Name, strings.Join(Names(), ", "))
}
