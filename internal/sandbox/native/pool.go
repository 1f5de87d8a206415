package native

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/cgroups"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// pool keeps Options.PoolSize sandboxes of the default shape sealed and
// idle, so that Create for a spec of that shape only has to adjust cgroup
// limits. A cold create pays a process start, namespace creation, the root
// and the seal (and on cgroup v1 a cgroup migration); none of that depends
// on the spec's limits, environment or working directory, which are applied
// on take. Specs of any other shape are created cold.
type pool struct {
	r    *Runtime
	size int

	ready  chan *Sandbox
	refill *refiller
	stop   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

// refillQuiet is how long after the latest take the pool waits before it
// makes a sandbox, while it still has one ready. A create keeps both of
// this machine's cores busy for a few milliseconds, and a take is nearly
// always followed at once by the taker's first exec (and over HTTP by its
// audit writes), which a refill running beside it slows down. With none
// ready the pool refills at once: the next take would be cold otherwise.
const refillQuiet = 25 * time.Millisecond

func newPool(r *Runtime, size int) *pool {
	p := &pool{r: r, size: size, ready: make(chan *Sandbox, size), refill: newRefiller(), stop: make(chan struct{})}
	p.wg.Add(1)
	go p.fill()
	return p
}

// shape is what every pooled sandbox is created with: the defaults, plus
// the exposed ports every sandbox of this daemon gets (Options.PoolExposedTCP).
func (p *pool) shape() sandbox.Spec {
	s := sandbox.Spec{}.WithDefaults()
	s.Network.ExposedTCP = slices.Clone(p.r.opts.PoolExposedTCP)
	s.Gate = slices.Clone(p.r.opts.PoolGate)
	s.Trust = p.r.opts.PoolTrust
	return s
}

// fits reports whether spec (with defaults applied) differs from the pool's
// shape only in what can change after creation. The tmpfs sizes (which
// follow the memory limit, see sandbox.TmpfsBudget) and the CPU count
// commands see (their affinity) are fixed at create.
func (p *pool) fits(spec sandbox.Spec) bool {
	d := p.shape()
	l, dl := spec.Limits, d.Limits
	return spec.Root == d.Root && spec.Hostname == d.Hostname && spec.Workspace == "" && spec.Trust == d.Trust &&
		len(spec.Mounts) == 0 && slices.Equal(spec.Network.ExposedTCP, d.Network.ExposedTCP) && len(spec.Network.LoopbackTCP) == 0 &&
		slices.Equal(spec.Gate, d.Gate) && (len(d.Gate) == 0 || !slices.ContainsFunc(spec.Env, isPATH)) &&
		l.WorkspaceBytes == dl.WorkspaceBytes && l.TmpBytes == dl.TmpBytes && l.OpenFiles == dl.OpenFiles &&
		p.r.cpus.Count(l.CPUs) == p.r.cpus.Count(dl.CPUs)
}

func (p *pool) fill() {
	defer p.wg.Done()
	p.refill.run(p.size, p.idle, p.add, p.stop)
}

// add makes one sandbox and puts it in the pool; false: the pool is
// closing.
func (p *pool) add() bool {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	sb, err := p.r.createCold(ctx, p.shape())
	cancel()
	if err != nil {
		p.r.opts.Logf("sandbox pool: %v", err)
		select {
		case <-time.After(time.Second):
			return true
		case <-p.stop:
			return false
		}
	}
	select {
	case p.ready <- sb:
		return true
	case <-p.stop:
		_ = sb.Destroy(context.Background())
		return false
	}
}

// idle reports how many sandboxes are ready.
func (p *pool) idle() int { return len(p.ready) }

// take returns a ready sandbox set up for spec, or nil.
func (p *pool) take(spec sandbox.Spec) *Sandbox {
	if !p.fits(spec) {
		return nil
	}
	for {
		var sb *Sandbox
		select {
		case sb = <-p.ready:
		default:
			return nil
		}
		p.refill.took()
		select {
		case <-sb.done: // died while idle
			_ = sb.Destroy(context.Background())
			continue
		default:
		}
		l, pl := spec.Limits, sb.spec.Limits
		if l.MemoryBytes != pl.MemoryBytes || l.Pids != pl.Pids || l.CPUs != pl.CPUs {
			if err := sb.cg.Update(cgroups.Limits{MemoryBytes: l.MemoryBytes, Pids: l.Pids, CPUs: l.CPUs}); err != nil {
				p.r.opts.Logf("sandbox pool: %v", err)
				_ = sb.Destroy(context.Background())
				return nil
			}
		}
		spec.Env = slices.Clone(spec.Env)
		sb.spec = spec
		return sb
	}
}

// close stops refilling and destroys the idle sandboxes.
func (p *pool) close(ctx context.Context) {
	p.once.Do(func() { close(p.stop) })
	p.wg.Wait()
	for {
		select {
		case sb := <-p.ready:
			_ = sb.Destroy(ctx)
		default:
			return
		}
	}
}
