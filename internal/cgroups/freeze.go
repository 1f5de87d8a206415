package cgroups

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Freeze stops every process of the cgroup (v1 freezer.state FROZEN, v2
// cgroup.freeze 1) and waits until the kernel reports it frozen: a frozen
// cgroup's tasks get no CPU time and keep their memory, open files and
// children. Freezing a frozen cgroup is not an error. ErrNotSupported when
// the hierarchy has no freezer (v1 without the freezer controller mounted).
//
// A freeze can wedge: a task frozen while its parent waits for it (a
// vfork child frozen before its exec, with pid 1 forking a command, leaves
// the parent in an uninterruptible wait that the v1 freezer never counts as
// frozen) keeps the cgroup FREEZING for good. So each attempt waits at
// most freezeAttemptWait; then the cgroup is thawed (the child runs on to
// its exec and the parent returns) and frozen again, up to freezeAttempts
// times. A cgroup that cannot be frozen before that, or before ctx ends
// (a task in uninterruptible sleep on a stuck device), is thawed again and
// Freeze fails, so a half-frozen cgroup is never left behind.
func (c *Cgroup) Freeze(ctx context.Context) error {
	f, err := c.freezer()
	if err != nil {
		return fmt.Errorf("cgroups: freeze %q: %w", c.name, err)
	}
	for attempt := 1; ; attempt++ {
		frozen, err := c.freezeOnce(ctx, f)
		if err != nil || frozen {
			return err
		}
		if attempt == freezeAttempts {
			return fmt.Errorf("cgroups: freeze %q: not frozen after %d attempts of %v (a task in uninterruptible sleep?), thawed again", c.name, freezeAttempts, freezeAttemptWait)
		}
	}
}

// freezeAttempts and freezeAttemptWait bound a Freeze that does not take
// (see Freeze): a healthy cgroup freezes in well under a millisecond.
const (
	freezeAttempts    = 5
	freezeAttemptWait = 200 * time.Millisecond
)

// freezeOnce asks for the freeze and waits up to freezeAttemptWait for it.
// It reports whether the cgroup froze; if not, it has been thawed again.
func (c *Cgroup) freezeOnce(ctx context.Context, f freezerFile) (bool, error) {
	if err := c.h.ops.write(f.file, f.frozen); err != nil {
		return false, fmt.Errorf("cgroups: freeze %q: %w", c.name, err)
	}
	attemptCtx, cancel := context.WithTimeout(ctx, freezeAttemptWait)
	defer cancel()
	var b backoff
	for {
		ok, err := f.isFrozen()
		if err != nil {
			_ = c.h.ops.write(f.file, f.thawed)
			return false, fmt.Errorf("cgroups: freeze %q: %w", c.name, err)
		}
		if ok {
			return true, nil
		}
		if werr := b.wait(attemptCtx); werr != nil {
			_ = c.h.ops.write(f.file, f.thawed)
			if ctx.Err() != nil {
				return false, fmt.Errorf("cgroups: freeze %q: not frozen in time (a task in uninterruptible sleep?), thawed again: %w", c.name, ctx.Err())
			}
			return false, nil
		}
	}
}

// Thaw lets a frozen cgroup run again (v1 freezer.state THAWED, v2
// cgroup.freeze 0). Thawing a running cgroup is not an error.
func (c *Cgroup) Thaw() error {
	f, err := c.freezer()
	if err != nil {
		return fmt.Errorf("cgroups: thaw %q: %w", c.name, err)
	}
	if err := c.h.ops.write(f.file, f.thawed); err != nil {
		return fmt.Errorf("cgroups: thaw %q: %w", c.name, err)
	}
	return nil
}

// Frozen reports whether the kernel reports the cgroup frozen.
func (c *Cgroup) Frozen() (bool, error) {
	f, err := c.freezer()
	if err != nil {
		return false, fmt.Errorf("cgroups: frozen %q: %w", c.name, err)
	}
	ok, err := f.isFrozen()
	if err != nil {
		return false, fmt.Errorf("cgroups: frozen %q: %w", c.name, err)
	}
	return ok, nil
}

// CanFreeze reports whether Freeze can work on this hierarchy.
func (h *Hierarchy) CanFreeze() bool { return h.version == 2 || h.has("freezer") }

// freezerFile is a cgroup's freeze control: the file, what to write to
// freeze and thaw it, and how to read the state the kernel reached.
type freezerFile struct {
	file, frozen, thawed string
	isFrozen             func() (bool, error)
}

func (c *Cgroup) freezer() (freezerFile, error) {
	switch {
	case c.h.version == 2:
		d := c.dirs()[0]
		return freezerFile{file: filepath.Join(d, "cgroup.freeze"), frozen: "1", thawed: "0", isFrozen: func() (bool, error) {
			v, err := readKeyed(filepath.Join(d, "cgroup.events"), "frozen")
			return v == 1, err
		}}, nil
	case c.h.has("freezer"):
		file := filepath.Join(c.dirFor("freezer"), "freezer.state")
		return freezerFile{file: file, frozen: "FROZEN", thawed: "THAWED", isFrozen: func() (bool, error) {
			// FREEZING while some task has not stopped yet.
			b, err := os.ReadFile(file)
			return strings.TrimSpace(string(b)) == "FROZEN", err
		}}, nil
	}
	return freezerFile{}, fmt.Errorf("%w: no freezer (cgroup v1 without the freezer controller mounted)", ErrNotSupported)
}
