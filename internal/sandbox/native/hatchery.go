package native

import (
	"context"
	"fmt"

	"github.com/ironclaw/ironclaw/internal/cgroups"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/setup"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

// hatchery keeps Options.SpareInits hatchlings: sandbox inits cloned
// ahead into fresh namespaces and their own cgroups, their id maps
// written, blocked reading what to build. A cold create (a spec the warm
// pool cannot serve: other mounts, ports, a workspace, a gate, or the
// pool empty) that the C init builds takes one and sends it its plan, so
// that the clone, the init's exec and the id maps leave its path; the
// spec shapes nothing of a hatchling but its limits (written on take)
// and its namespaces (the same for every spec the seal makes today, and
// checked on take).
//
// A hatchling runs nothing of anyone's: the steward's first act is to read
// its plan from the daemon's end of its control socket, which no one else
// holds. It dies with the daemon (parent-death signal), and its cgroup is
// collected at the next start like any sandbox's. Each costs a process, a
// descriptor (its socket) and its namespaces' kernel memory, charged to
// its cgroup.
type hatchery struct {
	r     *Runtime
	flags uintptr // every hatchling's namespaces: the default spec's
	s     *stock[*hatchling]
}

// newHatchery starts hatching, or returns nil (with a line to Logf) when
// a hatchling could serve no create here: no C init, or a seal whose
// namespaces the native backend cannot make.
func newHatchery(r *Runtime, size int) *hatchery {
	if r.plans == nil {
		r.opts.Logf("spare inits: off (sandboxes get the Go init)")
		return nil
	}
	cfg, err := r.initConfig(sandbox.Spec{}.WithDefaults())
	if err != nil {
		r.opts.Logf("spare inits: off (%v)", err)
		return nil
	}
	flags, err := cloneFlags(&cfg.Seal)
	if err != nil {
		r.opts.Logf("spare inits: off (%v)", err)
		return nil
	}
	h := &hatchery{r: r, flags: flags}
	h.s = newStock("spare inits", size, h.make, func(hl *hatchling) { hl.discard(r.opts.Logf) }, r.opts.Logf)
	return h
}

// make hatches one for the default spec's namespaces and limits.
func (h *hatchery) make() (*hatchling, error) {
	shape := sandbox.Spec{}.WithDefaults()
	cfg, err := h.r.initConfig(shape)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	hl, _, err := h.r.hatch(ctx, shape.Limits, cfg, false, false, nil)
	if err != nil {
		return nil, err
	}
	if !hl.cInit || hl.unshareCgroup {
		// Only a C init born in its cgroup waits for any plan; a host
		// where either is missing makes every sandbox cold.
		hl.discard(h.r.opts.Logf)
		return nil, fmt.Errorf("%w: this host's sandboxes need the Go init or a cgroup move after the clone", errStockOff)
	}
	return hl, nil
}

// idle reports how many hatchlings are ready.
func (h *hatchery) idle() int { return h.s.idle() }

// take returns a hatchling that can become a sandbox of cfg with limits
// l in force, or nil.
func (h *hatchery) take(cfg *wire.Config, l sandbox.Limits) *hatchling {
	if h.r.plans == nil || setup.Supports(cfg) != nil {
		return nil // the Go init's: not what hatchlings run
	}
	if flags, err := cloneFlags(&cfg.Seal); err != nil || flags != h.flags {
		return nil // other namespaces than every hatchling's
	}
	for {
		hl, ok := h.s.pop()
		if !ok {
			return nil
		}
		if hl.proc.exited() {
			hl.discard(h.r.opts.Logf) // died while it waited
			continue
		}
		if err := hl.cg.Update(cgroups.Limits{MemoryBytes: l.MemoryBytes, Pids: l.Pids, CPUs: l.CPUs}); err != nil {
			h.r.opts.Logf("spare inits: %v", err)
			hl.discard(h.r.opts.Logf)
			return nil
		}
		return hl
	}
}

// close stops hatching and discards the ready ones.
func (h *hatchery) close() { h.s.close() }

// exited reports whether the process has exited (without reaping it).
func (p *initProc) exited() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err != nil || info.Signo != 0
}

// takeHatchling is hatchery.take when the runtime keeps spare inits.
func (r *Runtime) takeHatchling(cfg *wire.Config, l sandbox.Limits) *hatchling {
	if r.hatchery == nil {
		return nil
	}
	return r.hatchery.take(cfg, l)
}
