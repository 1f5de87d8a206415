package api

import (
	"fmt"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/session"
)

// Ceiling is the most an agent may ask for at create without an operator
// (policy limits.max). A zero TTL or Idle means no ceiling of that kind.
type Ceiling struct {
	Limits    sandbox.Limits
	TTL, Idle time.Duration
	// DefaultTTL and DefaultIdle are what a create that sets none gets
	// (the daemon's defaults; zero is none).
	DefaultTTL, DefaultIdle time.Duration
}

// widening is what a create asked for above the ceiling; it becomes the
// limits of one sandbox.widen request, in the JSON shape that request's
// payload has.
type widening struct {
	Memory  int64    `json:"memory,omitempty"`
	Pids    int64    `json:"pids,omitempty"`
	CPUs    float64  `json:"cpus,omitempty"`
	Timeout duration `json:"timeout,omitempty"`
	Output  int64    `json:"output,omitempty"`
	TTL     duration `json:"ttl,omitempty"`
	Idle    duration `json:"idle,omitempty"`
}

func (w widening) empty() bool { return w == widening{} }

// clamp holds a create to the ceiling: every limit (and the TTL and idle
// timeout) above it is lowered to it, and what was asked for beyond is
// returned to be filed as a widening, as hosts off the allowlist are.
// Defaults above a ceiling the operator set lower are lowered too, without
// a widening (nobody asked for them). Limits that are fixed once a sandbox
// runs (workspace, tmp, open files) cannot be widened later, so asking
// above their ceiling is refused.
func (c *Ceiling) clamp(req *session.CreateRequest) (widening, error) {
	var w widening
	if c == nil {
		return w, nil
	}
	asked := req.Spec.Limits
	l := &req.Spec.Limits
	eff := req.Spec.WithDefaults().Limits
	max := c.Limits
	fixed := []struct {
		name     string
		ask, max int64
		set      *int64
		show     func(int64) string
	}{
		{"workspace", asked.WorkspaceBytes, max.WorkspaceBytes, &l.WorkspaceBytes, sandbox.FormatBytes},
		{"tmp", asked.TmpBytes, max.TmpBytes, &l.TmpBytes, sandbox.FormatBytes},
		{"open_files", asked.OpenFiles, max.OpenFiles, &l.OpenFiles, func(n int64) string { return fmt.Sprint(n) }},
	}
	for _, f := range fixed {
		if f.ask > f.max {
			return w, badRequest(fmt.Sprintf("limits.%s %s is above the operator's ceiling of %s (policy limits.max.%s); it cannot be widened once a sandbox runs",
				f.name, f.show(f.ask), f.show(f.max), f.name))
		}
	}
	// The ints: memory, pids, output.
	for _, f := range []struct {
		ask, eff, max int64
		set           *int64
		widen         *int64
	}{
		{asked.MemoryBytes, eff.MemoryBytes, max.MemoryBytes, &l.MemoryBytes, &w.Memory},
		{asked.Pids, eff.Pids, max.Pids, &l.Pids, &w.Pids},
		{asked.OutputBytes, eff.OutputBytes, max.OutputBytes, &l.OutputBytes, &w.Output},
		{asked.WorkspaceBytes, eff.WorkspaceBytes, max.WorkspaceBytes, &l.WorkspaceBytes, nil},
		{asked.TmpBytes, eff.TmpBytes, max.TmpBytes, &l.TmpBytes, nil},
		{asked.OpenFiles, eff.OpenFiles, max.OpenFiles, &l.OpenFiles, nil},
	} {
		if f.eff > f.max {
			*f.set = f.max
			if f.ask > f.max && f.widen != nil {
				*f.widen = f.ask
			}
		}
	}
	if eff.CPUs > max.CPUs {
		l.CPUs = max.CPUs
		if asked.CPUs > max.CPUs {
			w.CPUs = asked.CPUs
		}
	}
	if eff.Timeout > max.Timeout {
		l.Timeout = max.Timeout
		if asked.Timeout > max.Timeout {
			w.Timeout = duration(asked.Timeout)
		}
	}
	req.TTL, w.TTL = clampLifetime(req.TTL, c.DefaultTTL, c.TTL)
	req.Idle, w.Idle = clampLifetime(req.Idle, c.DefaultIdle, c.Idle)
	return w, nil
}

// clampLifetime holds an asked TTL or idle timeout (0: the default def,
// where 0 is none) to max (0: no ceiling), returning what to ask for and
// what to widen to.
func clampLifetime(ask, def, max time.Duration) (time.Duration, duration) {
	eff := ask
	if eff == 0 {
		eff = def
	}
	if max == 0 || (eff > 0 && eff <= max) {
		return ask, 0
	}
	if ask > max {
		return max, duration(ask)
	}
	return max, 0 // the default is none or above the ceiling
}
