package native

import (
	"errors"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// initProc is a sandbox's pid 1 as the daemon holds it: by its pid, not by
// a pidfd (what os.Process holds), so that a sandbox costs the daemon one
// descriptor, its control socket (10,000 sandboxes fit under a 20,000
// descriptor limit). A pid names its process for as long as the process
// is unreaped, even dead, and only the daemon, its parent, reaps it: kill
// and reap take one lock, and reap marks the pid spent before it frees it,
// so no signal ever reaches a process that reused the number.
type initProc struct {
	pid int

	mu     sync.Mutex
	reaped bool

	waitOnce sync.Once
	waitErr  error
}

// kill sends SIGKILL, unless the process is reaped already.
func (p *initProc) kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return nil
	}
	return syscall.Kill(p.pid, syscall.SIGKILL)
}

// wait blocks until the process has exited, then reaps it. Concurrent and
// repeated calls are safe: one reaps, the rest wait for it (a second
// waitid could otherwise wait on a new child that reused the pid).
func (p *initProc) wait() error {
	p.waitOnce.Do(func() { p.waitErr = p.reap() })
	return p.waitErr
}

func (p *initProc) reap() error {
	// Wait without reaping (WNOWAIT), so the pid stays this process's
	// while no lock is held; then reap under the lock kill takes.
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EINTR) {
			p.mu.Lock()
			p.reaped = true // not ours to wait for (ECHILD): signal it no more
			p.mu.Unlock()
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reaped = true
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(p.pid, &ws, unix.WNOHANG, nil)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
