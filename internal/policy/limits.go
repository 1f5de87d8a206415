package policy

import (
	"fmt"
	"math"
	"time"

	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"gopkg.in/yaml.v3"
)

// Limits is the limits section: what an agent may ask for without an
// operator, how much of the host all sandboxes together may commit, and
// what one agent principal may hold at once.
//
//	limits:
//	  max:                  # ceilings; a field left out is the default limit
//	    memory: 1G
//	    pids: 512
//	    cpus: 2
//	    timeout: 5m         # per exec
//	    output: 16M
//	    workspace: 1G       # fixed once a sandbox runs: above it, a create is refused
//	    tmp: 512M           # fixed, as workspace
//	    open_files: 4096    # fixed, as workspace
//	    ttl: 24h            # left out: the daemon's default TTL (none unless --ttl)
//	    idle: 2h            # left out: the daemon's default idle timeout
//	  idle_action: destroy  # destroy | pause: what an idle sandbox's idle timeout does
//	  overcommit:           # committed limits of all sandboxes <= host x factor
//	    memory: 1           # default 1: no more memory promised than the host has
//	    cpus: 16            # default 16: CPU limits are shares of time, not reservations
//	    pids: 1             # default 1
//	  per_agent:            # per principal ("agent", "agent:NAME")
//	    sandboxes: 50       # running at once; default 50
//	    execs: 64           # execs and file copies in flight; default 64
//	  per_sandbox:
//	    execs: 32           # in flight in one sandbox; default 32
type Limits struct {
	Max        Ceiling    `yaml:"max"`
	IdleAction string     `yaml:"idle_action"`
	Overcommit Overcommit `yaml:"overcommit"`
	PerAgent   AgentQuota `yaml:"per_agent"`
	PerSandbox struct {
		Execs int `yaml:"execs"`
	} `yaml:"per_sandbox"`
}

// Ceiling holds the highest limits an agent may ask for; zero fields are
// resolved by the daemon (the default limits, TTL and idle timeout).
type Ceiling struct {
	Memory    Size     `yaml:"memory"`
	Pids      int64    `yaml:"pids"`
	CPUs      float64  `yaml:"cpus"`
	Timeout   Duration `yaml:"timeout"`
	Output    Size     `yaml:"output"`
	Workspace Size     `yaml:"workspace"`
	Tmp       Size     `yaml:"tmp"`
	OpenFiles int64    `yaml:"open_files"`
	TTL       Duration `yaml:"ttl"`
	Idle      Duration `yaml:"idle"`
}

// Overcommit multiplies what the host has into what sandboxes may commit.
type Overcommit struct {
	Memory float64 `yaml:"memory"`
	CPUs   float64 `yaml:"cpus"`
	Pids   float64 `yaml:"pids"`
}

// AgentQuota bounds one principal.
type AgentQuota struct {
	Sandboxes int `yaml:"sandboxes"`
	Execs     int `yaml:"execs"`
}

// Idle actions (limits.idle_action): an idle sandbox ends (destroy, the
// default) or pauses until its next request (pause); its TTL ends it
// either way.
const (
	IdleDestroy = "destroy"
	IdlePause   = "pause"
)

// Defaults of the limits section.
const (
	DefaultOvercommitMemory = defaults.OvercommitMemory
	DefaultOvercommitCPUs   = defaults.OvercommitCPUs
	DefaultOvercommitPids   = defaults.OvercommitPids
	DefaultAgentSandboxes   = defaults.AgentSandboxes
	DefaultAgentExecs       = defaults.AgentExecs
	DefaultSandboxExecs     = defaults.SandboxExecs
)

// Size is a byte count written as "512M" in YAML.
type Size int64

// UnmarshalYAML implements yaml.Unmarshaler.
func (z *Size) UnmarshalYAML(n *yaml.Node) error {
	v, err := sandbox.ParseBytes(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %v", n.Line, err)
	}
	*z = Size(v)
	return nil
}

// SandboxLimits returns the ceiling's sandbox limits, each zero field
// filled from def.
func (c Ceiling) SandboxLimits(def sandbox.Limits) sandbox.Limits {
	pick := func(v, d int64) int64 {
		if v > 0 {
			return v
		}
		return d
	}
	l := sandbox.Limits{
		MemoryBytes:    pick(int64(c.Memory), def.MemoryBytes),
		Pids:           pick(c.Pids, def.Pids),
		CPUs:           c.CPUs,
		Timeout:        time.Duration(pick(int64(c.Timeout), int64(def.Timeout))),
		OutputBytes:    pick(int64(c.Output), def.OutputBytes),
		WorkspaceBytes: pick(int64(c.Workspace), def.WorkspaceBytes),
		TmpBytes:       pick(int64(c.Tmp), def.TmpBytes),
		OpenFiles:      pick(c.OpenFiles, def.OpenFiles),
	}
	if l.CPUs <= 0 {
		l.CPUs = def.CPUs
	}
	return l
}

func (l *Limits) validate() error {
	c := l.Max
	if c.Memory < 0 || c.Pids < 0 || c.CPUs < 0 || math.IsNaN(c.CPUs) || c.Timeout < 0 || c.Output < 0 ||
		c.Workspace < 0 || c.Tmp < 0 || c.OpenFiles < 0 || c.TTL < 0 || c.Idle < 0 {
		return fmt.Errorf("%w: limits.max: no ceiling may be negative", ErrInvalid)
	}
	switch l.IdleAction {
	case "":
		l.IdleAction = IdleDestroy
	case IdleDestroy, IdlePause:
	default:
		return fmt.Errorf("%w: limits.idle_action %q: want destroy or pause", ErrInvalid, l.IdleAction)
	}
	// Each ceiling must itself be a valid limit: check a full set in which
	// the ceiling's unset fields take the defaults.
	if err := c.SandboxLimits(sandbox.DefaultLimits).Validate(); err != nil {
		return fmt.Errorf("%w: limits.max: %v", ErrInvalid, err)
	}
	for _, f := range []struct {
		name string
		v    *float64
		def  float64
	}{
		{"limits.overcommit.memory", &l.Overcommit.Memory, DefaultOvercommitMemory},
		{"limits.overcommit.cpus", &l.Overcommit.CPUs, DefaultOvercommitCPUs},
		{"limits.overcommit.pids", &l.Overcommit.Pids, DefaultOvercommitPids},
	} {
		if err := setting(f.name, f.v, f.def, 0.1, 1000); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{
		{"limits.per_agent.sandboxes", &l.PerAgent.Sandboxes, DefaultAgentSandboxes},
		{"limits.per_agent.execs", &l.PerAgent.Execs, DefaultAgentExecs},
		{"limits.per_sandbox.execs", &l.PerSandbox.Execs, DefaultSandboxExecs},
	} {
		if err := setting(f.name, f.v, f.def, 1, 100000); err != nil {
			return err
		}
	}
	return nil
}
