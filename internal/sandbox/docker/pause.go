package docker

import (
	"context"
	"fmt"
	"strings"
)

// Pause has dockerd pause the container (the cgroup freezer; on gVisor,
// runsc pause) and returns once it is paused. Pausing a paused sandbox is
// not an error.
func (b *Sandbox) Pause(ctx context.Context) error {
	x := b.box
	if err := x.rt.cli.ContainerPause(ctx, x.cid); err != nil && !strings.Contains(err.Error(), "already paused") {
		return fmt.Errorf("sandbox %s: pause: %w", x.id, err)
	}
	return nil
}

// Resume has dockerd unpause the container; resuming a running one is not
// an error.
func (b *Sandbox) Resume(ctx context.Context) error {
	x := b.box
	if err := x.rt.cli.ContainerUnpause(ctx, x.cid); err != nil && !strings.Contains(err.Error(), "not paused") {
		return fmt.Errorf("sandbox %s: resume: %w", x.id, err)
	}
	return nil
}
