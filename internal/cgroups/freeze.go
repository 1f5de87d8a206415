package cgroups

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Freeze stops every process of the cgroup (v1 freezer.state FROZEN, v2
// cgroup.freeze 1) and waits until the kernel reports it frozen: a frozen
// cgroup's tasks get no CPU time and keep their memory, open files and
// children. A task that cannot be frozen before ctx ends (uninterruptible
// sleep on a stuck device) makes Freeze thaw the cgroup again and fail, so
// a half-frozen cgroup is never left behind. Freezing a frozen cgroup is
// not an error. ErrNotSupported when the hierarchy has no freezer (v1
// without the freezer controller mounted).
func (c *Cgroup) Freeze(ctx context.Context) error {
	f, err := c.freezer()
	if err != nil {
		return fmt.Errorf("cgroups: freeze %q: %w", c.name, err)
	}
	if err := c.h.ops.write(f.file, f.frozen); err != nil {
		return fmt.Errorf("cgroups: freeze %q: %w", c.name, err)
	}
	var b backoff
	for {
		ok, err := f.isFrozen()
		if err != nil {
			_ = c.h.ops.write(f.file, f.thawed)
			return fmt.Errorf("cgroups: freeze %q: %w", c.name, err)
		}
		if ok {
			return nil
		}
		if werr := b.wait(ctx); werr != nil {
			_ = c.h.ops.write(f.file, f.thawed)
			return fmt.Errorf("cgroups: freeze %q: not frozen in time (a task in uninterruptible sleep?), thawed again: %w", c.name, werr)
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
