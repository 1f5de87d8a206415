package cgroups

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// freezeWait bounds how long kill waits for a freeze to complete. A task in
// uninterruptible sleep can delay freezing indefinitely; killing then
// proceeds unfrozen and relies on the repeated sweeps instead.
const freezeWait = time.Second

// kill kills every process in the cgroup and waits until none is left.
// A cgroup that does not exist (any more) has no processes.
func (c *Cgroup) kill(ctx context.Context) error {
	// Refuse to kill the caller itself (added by mistake, or a sandbox
	// name reused for the daemon's own cgroup): that would take down
	// every other sandbox's supervisor with it.
	pids, err := c.listPids(true)
	if err == nil && slices.Contains(pids, os.Getpid()) {
		return fmt.Errorf("refusing to kill: this process (pid %d) is in the cgroup", os.Getpid())
	}
	if err == nil && len(pids) == 0 {
		// The usual case at teardown: the sandbox's pid namespace is gone
		// already. Nothing can join an empty cgroup but by migration, which
		// only the daemon does, so there is nothing to freeze.
		return nil
	}
	if c.h.version == 2 {
		p := filepath.Join(c.dirs()[0], "cgroup.kill")
		if exists(p) {
			// cgroup.kill kills the whole subtree atomically with respect
			// to fork, so no freezing is needed.
			if err := c.h.ops.write(p, "1"); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return c.sweep(ctx)
		}
	}
	thaw := c.freeze(ctx)
	if pids, err := c.listPids(true); err == nil {
		// While frozen nobody can fork, exit or recycle a pid, so this
		// one pass reaches everyone; the pending SIGKILLs take effect on
		// thaw and also make any fork attempt fail.
		c.signal(pids)
	}
	if thaw != nil {
		if err := thaw(); err != nil {
			return err
		}
	}
	return c.sweep(ctx)
}

// sweep SIGKILLs whatever is listed in the cgroup until nothing is.
func (c *Cgroup) sweep(ctx context.Context) error {
	var b backoff
	for {
		pids, err := c.listPids(true)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		c.signal(pids)
		if err := b.wait(ctx); err != nil {
			return fmt.Errorf("%d processes still in cgroup (%v): %w", len(pids), pids, err)
		}
	}
}

// backoff spaces the retries of a wait for exiting tasks: 1ms, doubling
// up to 50ms. The zero value is ready.
type backoff struct{ delay time.Duration }

// wait sleeps the next delay, or returns ctx's error if it ends first.
func (b *backoff) wait(ctx context.Context) error {
	b.delay = min(max(2*b.delay, time.Millisecond), 50*time.Millisecond)
	t := time.NewTimer(b.delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// freeze freezes the cgroup if the hierarchy can, waiting up to freezeWait
// for it to take effect, and returns the function that thaws it (nil if
// nothing was frozen). Failure to freeze is not fatal: kill falls back to
// repeated sweeps.
func (c *Cgroup) freeze(ctx context.Context) (thaw func() error) {
	var file, frozen, thawed string
	var isFrozen func() bool
	switch {
	case c.h.version == 2:
		d := c.dirs()[0]
		file, frozen, thawed = filepath.Join(d, "cgroup.freeze"), "1", "0"
		isFrozen = func() bool {
			v, err := readKeyed(filepath.Join(d, "cgroup.events"), "frozen")
			return err == nil && v == 1
		}
	case c.h.has("freezer"):
		file, frozen, thawed = filepath.Join(c.dirFor("freezer"), "freezer.state"), "FROZEN", "THAWED"
		isFrozen = func() bool {
			b, err := os.ReadFile(file)
			return err == nil && strings.TrimSpace(string(b)) == "FROZEN"
		}
	default:
		return nil
	}
	if !exists(file) || c.h.ops.write(file, frozen) != nil {
		return nil
	}
	thaw = func() error {
		if err := c.h.ops.write(file, thawed); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("thaw: %w", err)
		}
		return nil
	}
	deadline := time.Now().Add(freezeWait)
	for !isFrozen() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	return thaw
}

// signal sends SIGKILL to each pid that is still in the cgroup. It goes
// through pidfds and re-reads cgroup.procs after opening them: a pid listed
// earlier may have exited and been reused by an unrelated process, but if a
// pid is still listed after its pidfd was opened, the pidfd refers to the
// process in our cgroup (or to one that has since died, which the kernel
// then refuses to signal).
func (c *Cgroup) signal(pids []int) {
	fds := make(map[int]int, len(pids))
	defer func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}()
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if errors.Is(err, unix.ENOSYS) {
			// Kernel before 5.3: plain kill, accepting the tiny reuse race.
			for _, p := range pids {
				_ = unix.Kill(p, unix.SIGKILL)
			}
			return
		}
		if err == nil {
			fds[pid] = fd
		}
	}
	still, err := c.listPids(true)
	if err != nil {
		return
	}
	for _, pid := range still {
		if fd, ok := fds[pid]; ok {
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		}
	}
}

// listPids returns the sorted, de-duplicated pids in the cgroup's
// directories and their descendants in every hierarchy. With ignoreMissing,
// a directory that does not exist contributes nothing.
func (c *Cgroup) listPids(ignoreMissing bool) ([]int, error) {
	seen := map[int]bool{}
	var walk func(dir string) error
	walk = func(dir string) error {
		pids, err := readPids(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			if ignoreMissing && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		for _, p := range pids {
			seen[p] = true
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			if ignoreMissing && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		for _, e := range entries {
			if e.IsDir() {
				if err := walk(filepath.Join(dir, e.Name())); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, d := range c.dirs() {
		if err := walk(d); err != nil {
			return nil, err
		}
	}
	out := make([]int, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Ints(out)
	return out, nil
}
