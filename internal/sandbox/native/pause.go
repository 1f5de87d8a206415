package native

import (
	"context"
	"errors"
	"fmt"

	"github.com/ironclaw/ironclaw/internal/cgroups"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// Pause freezes every process of the sandbox, its pid 1 included, through
// its cgroup's freezer (v1 freezer.state, v2 cgroup.freeze) and returns
// once the kernel reports it frozen: no CPU time until Resume, memory,
// files and processes kept. Commands in flight stop where they are (their
// wall-time limits keep counting). Pausing a paused sandbox is not an
// error. ErrUnsupported on a cgroup v1 host without the freezer mounted.
func (b *Sandbox) Pause(ctx context.Context) error {
	select {
	case <-b.done:
		return fmt.Errorf("sandbox %s: %w: it has ended", b.id, sandbox.ErrInvalidRequest)
	default:
	}
	if err := b.cg.Freeze(ctx); err != nil {
		if errors.Is(err, cgroups.ErrNotSupported) {
			return fmt.Errorf("sandbox %s: pause: %w: %v", b.id, sandbox.ErrUnsupported, err)
		}
		return fmt.Errorf("sandbox %s: pause: %w", b.id, err)
	}
	return nil
}

// Resume thaws a paused sandbox; resuming a running one is not an error.
func (b *Sandbox) Resume(ctx context.Context) error {
	if err := b.cg.Thaw(); err != nil {
		if errors.Is(err, cgroups.ErrNotSupported) {
			return fmt.Errorf("sandbox %s: resume: %w: %v", b.id, sandbox.ErrUnsupported, err)
		}
		return fmt.Errorf("sandbox %s: resume: %w", b.id, err)
	}
	return nil
}
