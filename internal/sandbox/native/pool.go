package native

import (
	"context"
	"slices"

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
	r *Runtime
	s *stock[*Sandbox]
}

func newPool(r *Runtime, size int) *pool {
	p := &pool{r: r}
	p.s = newStock("sandbox pool", size, p.make, func(sb *Sandbox) {
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		defer cancel()
		_ = sb.Destroy(ctx)
	}, r.opts.Logf)
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

// make makes one sandbox of the pool's shape.
func (p *pool) make() (*Sandbox, error) {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	return p.r.createCold(ctx, p.shape(), nil)
}

// idle reports how many sandboxes are ready.
func (p *pool) idle() int { return p.s.idle() }

// take returns a ready sandbox set up for spec, or nil.
func (p *pool) take(spec sandbox.Spec) *Sandbox {
	if !p.fits(spec) {
		return nil
	}
	for {
		sb, ok := p.s.pop()
		if !ok {
			return nil
		}
		select {
		case <-sb.done: // died while idle
			_ = sb.Destroy(context.Background())
			continue
		default:
		}
		// Update writes only the limits that differ from the pool's.
		l := spec.Limits
		if err := sb.cg.Update(cgroups.Limits{MemoryBytes: l.MemoryBytes, Pids: l.Pids, CPUs: l.CPUs}); err != nil {
			p.r.opts.Logf("sandbox pool: %v", err)
			_ = sb.Destroy(context.Background())
			return nil
		}
		spec.Env = slices.Clone(spec.Env)
		sb.spec = spec
		return sb
	}
}

// close stops refilling and destroys the idle sandboxes.
func (p *pool) close() { p.s.close() }
