package oci

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// paused holds the boxes ever paused, so that only their teardown pays
// for a resume.
var paused sync.Map // *box -> struct{}

// pausedOnce reports whether x was ever paused, and forgets it.
func (x *box) pausedOnce() bool {
	_, ok := paused.LoadAndDelete(x)
	return ok
}

// Pause freezes the container (`runc pause`, `crun pause`: the cgroup
// freezer; `runsc pause`: gVisor stops every task of the sandbox's
// kernel) and returns once the runtime reports it paused. Pausing a
// paused sandbox is not an error.
func (b *Sandbox) Pause(ctx context.Context) error {
	x := b.box
	paused.Store(x, struct{}{})
	if _, err := x.rt.run(ctx, nil, "pause", x.id); err != nil && !b.alreadyIn(ctx, "paused") {
		return fmt.Errorf("sandbox %s: pause: %w", x.id, err)
	}
	return nil
}

// Resume thaws a paused sandbox (`<runtime> resume`); resuming a running
// one is not an error.
func (b *Sandbox) Resume(ctx context.Context) error {
	x := b.box
	if _, err := x.rt.run(ctx, nil, "resume", x.id); err != nil && !b.alreadyIn(ctx, "running") {
		return fmt.Errorf("sandbox %s: resume: %w", x.id, err)
	}
	return nil
}

// alreadyIn reports whether the container is in state ("paused",
// "running") after the runtime refused to move it there: pausing a paused
// container and resuming a running one are refused by runc and runsc,
// each in words of its own, so the runtime's state is asked instead.
func (b *Sandbox) alreadyIn(ctx context.Context, state string) bool {
	x := b.box
	out, err := x.rt.run(ctx, nil, "state", x.id)
	if err != nil {
		return false
	}
	var st struct {
		Status string `json:"status"`
	}
	return json.Unmarshal(out, &st) == nil && st.Status == state
}
