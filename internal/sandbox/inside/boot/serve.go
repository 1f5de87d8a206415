package boot

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox/inside/execpath"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside/gaterun"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside/steward"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

// agent serves the daemon's requests. Forks happen on the main thread only
// (see init); everything else runs in goroutines.
type agent struct {
	conn *wire.Conn

	// mu is held across fork+record and around each reap, so a child can
	// never be reaped before its exec ID is recorded.
	mu      sync.Mutex
	running map[int]uint64 // pid -> exec ID
	pgids   map[uint64]int // exec ID -> process group (== pid)

	// onMain runs jobs on the main thread: forks, so every command shares
	// one cgroup namespace and landlock domain, and signals, because before
	// landlock ABI 8 each thread has a sibling domain of its own and only
	// the forking thread's domain may signal the commands.
	onMain chan func()

	// progs are the programs to hand pid 1 to the steward with once idle
	// (steward.go); nil: this agent stays pid 1. Read and cleared by the
	// reader only.
	progs *programs
	// handOverAt is when the first handover is due, unless a file
	// operation puts it off.
	handOverAt time.Time
	// fileOps counts the file operations under way: none may be cut
	// short by the handover.
	fileOps atomic.Int32
}

// serve serves the daemon's requests until it hangs up. runs are the
// commands a steward handed over; progs, the programs to hand pid 1 to
// the steward with (nil: never), at handOverAt or once idle after it.
func serve(conn *wire.Conn, runs []steward.Run, progs *programs, handOverAt time.Time) {
	a := &agent{conn: conn, running: map[int]uint64{}, pgids: map[uint64]int{}, onMain: make(chan func()), progs: progs, handOverAt: handOverAt}
	for _, r := range runs {
		a.running[r.Pid] = r.ID
		a.pgids[r.ID] = r.Pid
	}
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGCHLD)
	kickReaper(sigc) // children that exited while the steward was pid 1
	go a.reap(sigc)
	go a.read()
	for job := range a.onMain {
		job()
	}
}

// read dispatches requests until the daemon hangs up.
func (a *agent) read() {
	defer close(a.onMain)
	// Only what the steward does not serve keeps this agent pid 1: the
	// handover is due IdleBeforeSteward after the last file operation,
	// however many commands start meanwhile.
	due := a.handOverAt
	for {
		if a.progs != nil {
			_ = a.conn.SetReadDeadline(due)
		}
		var req wire.Request
		files, err := a.conn.Recv(&req)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if a.fileOps.Load() == 0 {
					a.handToSteward() // returns only if the steward did not start
				} else {
					due = time.Now().Add(steward.IdleBeforeSteward) // one is still under way
				}
				continue
			}
			// The daemon hung up (or sent something malformed, its bug):
			// either way pid 1 leaves, and the sandbox with it.
			return
		}
		switch req.Op {
		case wire.OpExec:
			a.onMain <- func() { a.start(req, files) }
		case wire.OpSignal:
			wire.CloseAll(files)
			a.onMain <- func() { a.signal(req) }
		case wire.OpWrite:
			due = time.Now().Add(steward.IdleBeforeSteward)
			a.fileOp(func() { a.writeFile(req, files) })
		case wire.OpRead:
			due = time.Now().Add(steward.IdleBeforeSteward)
			a.fileOp(func() { a.readFile(req, files) })
		case wire.OpList:
			due = time.Now().Add(steward.IdleBeforeSteward)
			a.fileOp(func() { a.listDir(req, files) })
		default:
			wire.CloseAll(files)
			a.fail(req.ID, "bad-request", 0, fmt.Errorf("unknown op %q", req.Op))
		}
	}
}

// fileOp runs one file operation in its own goroutine, counted until its
// last reply is sent.
func (a *agent) fileOp(op func()) {
	a.fileOps.Add(1)
	go func() {
		defer a.fileOps.Add(-1)
		op()
	}()
}

func (a *agent) fail(id uint64, code string, errno syscall.Errno, err error) {
	_ = a.conn.Send(wire.Reply{Op: wire.OpFailed, ID: id, Code: code, Errno: int(errno), Err: err.Error()})
}

// start forks one command. It runs on the locked main thread.
func (a *agent) start(req wire.Request, files []*os.File) {
	defer wire.CloseAll(files)
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		a.fail(req.ID, "bad-request", 0, errors.New("empty command"))
		return
	}
	if st, err := os.Stat(req.Dir); err != nil || !st.IsDir() {
		a.fail(req.ID, "bad-cwd", unix.ENOTDIR, fmt.Errorf("working directory %s does not exist", req.Dir))
		return
	}
	prog, errno := execpath.Look(req.Argv[0], req.Env)
	if errno != 0 {
		a.failStart(req.ID, req.Argv[0], errno)
		return
	}
	env := req.Env
	if real, err := gateRun(&prog, &env, &req); err != nil {
		a.fail(req.ID, "not-executable", gaterun.Errno(err), err)
		return
	} else if real != nil {
		defer real.Close()
	}
	pidfd := -1
	attr := &syscall.ProcAttr{Dir: req.Dir, Env: env, Sys: &syscall.SysProcAttr{Setsid: true}}
	var master *os.File
	if req.TTY {
		m, slave, err := openPTY(req.Rows, req.Cols)
		if err != nil {
			a.fail(req.ID, "io", 0, fmt.Errorf("terminal: %w", err))
			return
		}
		defer slave.Close()
		defer m.Close()
		master = m
		attr.Files = []uintptr{slave.Fd(), slave.Fd(), slave.Fd()}
		attr.Sys.Setctty = true
		attr.Sys.Ctty = 0
	} else {
		if len(files) != 3 {
			a.fail(req.ID, "bad-request", 0, fmt.Errorf("exec needs 3 descriptors, got %d", len(files)))
			return
		}
		attr.Files = []uintptr{files[0].Fd(), files[1].Fd(), files[2].Fd()}
	}
	// "started" goes out before the lock is released: the reaper needs the
	// lock to report "exited", so the daemon always sees them in order.
	a.mu.Lock()
	if len(a.running) < maxWatchedExits {
		attr.Sys.PidFD = &pidfd
	}
	var pid int
	var err error
	initOOM.aroundFork(func() { pid, err = syscall.ForkExec(prog, req.Argv, attr) })
	if (errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE)) && attr.Sys.PidFD != nil {
		// Out of descriptors for the pidfd: the command still starts,
		// and SIGCHLD reports its exit.
		pidfd, attr.Sys.PidFD = -1, nil
		initOOM.aroundFork(func() { pid, err = syscall.ForkExec(prog, req.Argv, attr) })
	}
	if err == nil {
		a.running[pid] = req.ID
		a.pgids[req.ID] = pid
		reply := wire.Reply{Op: wire.OpStarted, ID: req.ID, Pid: pid}
		if master != nil {
			_ = a.conn.Send(reply, master)
		} else {
			_ = a.conn.Send(reply)
		}
	}
	a.mu.Unlock()
	if err == nil && pidfd >= 0 {
		go a.awaitExit(pid, pidfd)
	} else if pidfd >= 0 {
		_ = unix.Close(pidfd)
	}
	if err != nil {
		var en syscall.Errno
		if errors.As(err, &en) && (en == unix.EAGAIN || en == unix.ENOMEM) {
			a.fail(req.ID, wire.CodeNoResources, en, fmt.Errorf("%s: cannot start a process: the sandbox is at its process or memory limit (%w)", req.Argv[0], en))
		} else if errors.As(err, &en) {
			a.failStart(req.ID, req.Argv[0], en)
		} else {
			a.fail(req.ID, "io", 0, err)
		}
	}
}

func (a *agent) failStart(id uint64, name string, errno syscall.Errno) {
	code := "not-executable"
	if errno == unix.ENOENT {
		code = "not-found"
	}
	a.fail(id, code, errno, fmt.Errorf("%s: %w", name, errno))
}

// maxWatchedExits bounds the commands whose exit awaitExit watches, each
// through a pidfd pid 1 holds open: past it, SIGCHLD alone reports exits,
// so many background processes cannot run pid 1 out of descriptors.
const maxWatchedExits = 64

// awaitExit reports a command's exit as soon as its pidfd turns readable.
// That is one wake-up of the runtime's poller; SIGCHLD first wakes the
// runtime's signal thread, then hops through a channel to the reaper, which
// on a busy two-core host cost a round trip about 0.1-0.2 ms. SIGCHLD's
// reaper stays: it collects orphans, and it is the backstop on a kernel
// without pidfd polling or waitid(P_PIDFD) (before 5.4). Whichever reaps
// the command first reports it; the other finds it gone.
func (a *agent) awaitExit(pid, pidfd int) {
	if err := unix.SetNonblock(pidfd, true); err != nil {
		_ = unix.Close(pidfd)
		return
	}
	f := os.NewFile(uintptr(pidfd), "pidfd") // non-blocking: on the poller
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	// The callback returns true once the command has exited (without
	// reaping it, so the reap below stays under a.mu) or when waitid
	// fails (ECHILD: SIGCHLD's reaper was first), false to wait.
	_ = rc.Read(func(fd uintptr) bool {
		var si unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, int(fd), &si, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		return err != nil || si.Signo == int32(unix.SIGCHLD)
	})
	a.reapPid(pid)
}

// reapPid reaps one command if it is still ours to reap and reports it.
func (a *agent) reapPid(pid int) {
	var ws syscall.WaitStatus
	a.mu.Lock()
	id, ours := a.running[pid]
	if ours {
		// Still in running, so nobody reaped it: pid names our zombie (or
		// our command, if waitid failed for another reason; then WNOHANG
		// finds nothing and SIGCHLD's reaper reports it later).
		if got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); err != nil || got != pid {
			ours = false
		} else {
			delete(a.running, pid)
			delete(a.pgids, id)
			// Sent under a.mu, so a handover to the steward (which holds
			// it) never finds the command reaped and its exit unsent.
			_ = a.conn.Send(wire.Reply{Op: wire.OpExited, ID: id, Status: int(ws)})
		}
	}
	a.mu.Unlock()
}

// reap collects every child, ours or orphaned ones reparented to pid 1.
func (a *agent) reap(sigc <-chan os.Signal) {
	for range sigc {
		for {
			var ws syscall.WaitStatus
			a.mu.Lock()
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			var id uint64
			var ours bool
			if pid > 0 {
				id, ours = a.running[pid]
				delete(a.running, pid)
				if ours {
					delete(a.pgids, id)
					_ = a.conn.Send(wire.Reply{Op: wire.OpExited, ID: id, Status: int(ws)}) // under a.mu, as in reapPid
				}
			}
			a.mu.Unlock()
			if err != nil || pid <= 0 {
				break
			}
		}
	}
}

// signal delivers a signal to an exec's whole process group. Processes that
// left the group (setsid) are ended when the sandbox is destroyed.
func (a *agent) signal(req wire.Request) {
	a.mu.Lock()
	pgid, ok := a.pgids[req.ID]
	a.mu.Unlock()
	if ok {
		_ = syscall.Kill(-pgid, syscall.Signal(req.Signal))
	}
}

// openPTY allocates a terminal on the sandbox's own devpts instance.
func openPTY(rows, cols uint16) (master, slave *os.File, err error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	master = os.NewFile(uintptr(mfd), "ptmx")
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, err
	}
	n, err := unix.IoctlGetUint32(mfd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	sfd, err := unix.Open(fmt.Sprintf("/dev/pts/%d", n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	if rows > 0 && cols > 0 {
		_ = unix.IoctlSetWinsize(sfd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}
	return master, os.NewFile(uintptr(sfd), "pts"), nil
}
