package native

import (
	"context"
	"errors"
	"time"

	"github.com/ironclaw/ironclaw/internal/cgroups"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// spareCgroups keeps Options.SpareCgroups sandbox cgroups made ahead of
// need, so that whoever starts a sandbox init (the hatchery, or a cold
// create that finds no spare init) skips making its cgroup: on cgroup v1
// a directory in each of five controllers, the limits and pid 1's pids
// reserve, about 0.56 ms on the 2-core guest (docs/performance.md).
//
// Each spare is made for a sandbox id drawn in advance and is named as
// that sandbox's cgroup would be (Runtime.cgroupName), so nothing tells a
// sandbox made from a spare from one made cold, and a spare left behind
// by a crash is collected by the next runtime like any sandbox cgroup of
// a dead owner. A spare holds no process; it costs the kernel a few
// control structures per controller.
//
// Spares carry the default limits; a take with other limits writes only
// those that differ (cgroups.Cgroup.Update).
type spareCgroups struct {
	r      *Runtime
	limits cgroups.Limits
	s      *stock[spareCgroup]
}

// spareCgroup is one cgroup made ahead and the sandbox id it is named for.
type spareCgroup struct {
	id string
	cg *cgroups.Cgroup
}

func newSpareCgroups(r *Runtime, size int) *spareCgroups {
	d := sandbox.Spec{}.WithDefaults().Limits
	sc := &spareCgroups{r: r, limits: cgroups.Limits{MemoryBytes: d.MemoryBytes, Pids: d.Pids, CPUs: d.CPUs}}
	sc.s = newStock("spare cgroups", size, sc.make, sc.discard, r.opts.Logf)
	return sc
}

// make makes one spare as createCold would make a sandbox's cgroup,
// pid 1's pids reserve included (cgroup v1).
func (sc *spareCgroups) make() (spareCgroup, error) {
	id := newID()
	cg, err := sc.r.cg.Create(sc.r.cgroupName(id), sc.limits)
	if err != nil {
		return spareCgroup{}, err
	}
	sp := spareCgroup{id: id, cg: cg}
	if err := cg.ReservePids(sandbox.InitPidsReserve); err != nil && !errors.Is(err, cgroups.ErrNotSupported) {
		sc.discard(sp)
		return spareCgroup{}, err
	}
	return sp, nil
}

func (sc *spareCgroups) discard(sp spareCgroup) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sp.cg.Destroy(ctx); err != nil {
		sc.r.opts.Logf("spare cgroups: removing %s: %v", sp.cg.Name(), err)
	}
}

// take returns a ready spare with limits l in force, or false when none
// is ready (or setting l failed, which the create then meets itself).
func (sc *spareCgroups) take(l cgroups.Limits) (spareCgroup, bool) {
	sp, ok := sc.s.pop()
	if !ok {
		return spareCgroup{}, false
	}
	if err := sp.cg.Update(l); err != nil {
		sc.r.opts.Logf("spare cgroups: %v", err)
		sc.discard(sp)
		return spareCgroup{}, false
	}
	return sp, true
}

// idle reports how many spares are ready.
func (sc *spareCgroups) idle() int { return sc.s.idle() }

// close stops making spares and removes the ready ones.
func (sc *spareCgroups) close() { sc.s.close() }
