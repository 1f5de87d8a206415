package native

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/cgroups"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// spareCgroups keeps Options.SpareCgroups sandbox cgroups made ahead of
// need, so that a cold create (a spec the warm pool cannot serve, or an
// empty pool) skips making its cgroup: on cgroup v1 a directory in each
// of five controllers, the limits and pid 1's pids reserve, about 0.56 ms
// of a cold create on the 2-core guest (docs/performance.md).
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
	size   int
	limits cgroups.Limits

	ready  chan spareCgroup
	refill *refiller
	stop   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
	// lastErr is the latest failure's text, logged once (only fill
	// touches it).
	lastErr string
}

// spareCgroup is one cgroup made ahead and the sandbox id it is named for.
type spareCgroup struct {
	id string
	cg *cgroups.Cgroup
}

// spareRetry is how long making spares pauses after a failure (a full
// host, a cgroup folder removed under the daemon): the creates that find
// none make their own cgroups, and report the failure themselves.
const spareRetry = time.Second

func newSpareCgroups(r *Runtime, size int) *spareCgroups {
	d := sandbox.Spec{}.WithDefaults().Limits
	s := &spareCgroups{r: r, size: size,
		limits: cgroups.Limits{MemoryBytes: d.MemoryBytes, Pids: d.Pids, CPUs: d.CPUs},
		ready:  make(chan spareCgroup, size), refill: newRefiller(), stop: make(chan struct{})}
	s.wg.Add(1)
	go s.fill()
	return s
}

// fill keeps size spares ready, paced as the pool is (refiller).
func (s *spareCgroups) fill() {
	defer s.wg.Done()
	s.refill.run(s.size, s.idle, s.add, s.stop)
}

// add makes one spare and stocks it; false: closing.
func (s *spareCgroups) add() bool {
	sp, err := s.make()
	if err != nil {
		// One line per kind of failure, not one a second: the creates
		// that find no spare meet it too, and say so.
		if msg := err.Error(); msg != s.lastErr {
			s.r.opts.Logf("spare cgroups: %v (retrying every %v)", err, spareRetry)
			s.lastErr = msg
		}
		select {
		case <-time.After(spareRetry):
			return true
		case <-s.stop:
			return false
		}
	}
	s.lastErr = ""
	select {
	case s.ready <- sp:
		return true
	case <-s.stop:
		s.discard(sp)
		return false
	}
}

// make makes one spare as createCold would make a sandbox's cgroup,
// pid 1's pids reserve included (cgroup v1).
func (s *spareCgroups) make() (spareCgroup, error) {
	id := newID()
	cg, err := s.r.cg.Create(s.r.cgroupName(id), s.limits)
	if err != nil {
		return spareCgroup{}, err
	}
	sp := spareCgroup{id: id, cg: cg}
	if err := cg.ReservePids(sandbox.InitPidsReserve); err != nil && !errors.Is(err, cgroups.ErrNotSupported) {
		s.discard(sp)
		return spareCgroup{}, err
	}
	return sp, nil
}

func (s *spareCgroups) discard(sp spareCgroup) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sp.cg.Destroy(ctx); err != nil {
		s.r.opts.Logf("spare cgroups: removing %s: %v", sp.cg.Name(), err)
	}
}

// take returns a ready spare with limits l in force, or false when none
// is ready (or setting l failed, which the create then meets itself).
func (s *spareCgroups) take(l cgroups.Limits) (spareCgroup, bool) {
	var sp spareCgroup
	select {
	case sp = <-s.ready:
	default:
		return spareCgroup{}, false
	}
	s.refill.took()
	if err := sp.cg.Update(l); err != nil {
		s.r.opts.Logf("spare cgroups: %v", err)
		s.discard(sp)
		return spareCgroup{}, false
	}
	return sp, true
}

// idle reports how many spares are ready.
func (s *spareCgroups) idle() int { return len(s.ready) }

// close stops making spares and removes the ready ones.
func (s *spareCgroups) close() {
	s.once.Do(func() { close(s.stop) })
	s.wg.Wait()
	for {
		select {
		case sp := <-s.ready:
			s.discard(sp)
		default:
			return
		}
	}
}
