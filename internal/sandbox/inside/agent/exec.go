package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside/execpath"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

// afterExit bounds how long the front keeps copying once the command has
// exited: output a process it left behind writes later is dropped, as on
// the native backend.
const afterExit = 150 * time.Millisecond

// pollMin and pollMax bound the interval at which the front asks whether
// the command has exited.
const (
	pollMin = 500 * time.Microsecond
	pollMax = 25 * time.Millisecond
)

// execMain: args are nonce, nproc, cwd, argv... (nproc: the command's
// RLIMIT_NPROC, 0 for none).
//
// The front forks the command (it does not execve into it) and stays until
// the command exits. The command writes to pipes of the front's own, which
// the front copies to its stdout and stderr; when the command exits, the
// front copies what is left for at most afterExit and exits with the
// command's status (a death by signal N as 128+N, the way the runtimes
// report it). So a process the command leaves in the background, which
// holds those pipes open, never holds the runtime's exec: runc and runsc
// proxy an exec's stdio and wait for it to reach EOF.
func execMain(args []string) int {
	if len(args) < 4 || args[0] == "" {
		fmt.Fprintln(os.Stderr, "ironclaw: oci helper exec: want nonce, nproc, cwd and a command")
		return wire.HelperExitRefused
	}
	nproc, err := strconv.ParseUint(args[1], 10, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ironclaw: oci helper exec: bad nproc %q\n", args[1])
		return wire.HelperExitRefused
	}
	// While the command runs, the front's threads count against the
	// sandbox's pids limit (RLIMIT_NPROC on runsc, the pids cgroup on runc
	// and crun), and a Go program that cannot make a thread it wants dies.
	// So the front never blocks a thread in a system call, the way that
	// makes the Go runtime start another: one P, no os/signal (its
	// receiver blocks a thread each time it waits), the command's exit
	// polled with WNOHANG (at once when its output ends, else backing off
	// to pollMax), and its own stdout and stderr served by the poller like
	// the command's pipes.
	runtime.GOMAXPROCS(1)
	// The command and what it forks are the OOM killer's first choice,
	// never the agent (see sandbox.WorkloadOOMScoreAdj). Raising it needs
	// no privilege; a runtime that lowered the agent's started us at the
	// agent's value.
	if f, err := os.OpenFile("/proc/self/oom_score_adj", os.O_WRONLY, 0); err == nil {
		_, _ = f.WriteString(strconv.Itoa(sandbox.WorkloadOOMScoreAdj))
		f.Close()
	}
	stdout, stderr := pollable(1, "stdout"), pollable(2, "stderr")
	marker, cwd, argv := wire.Marker(args[0]), args[2], args[3:]
	fail := func(code string, errno syscall.Errno, text string) int {
		fmt.Fprintf(stderr, "%sfailed %s %d %s\n", marker, code, int(errno), strings.ReplaceAll(text, "\n", " "))
		if code == wire.CodeNotFound {
			return 127
		}
		return 126
	}
	if argv[0] == "" {
		return fail(wire.CodeBadRequest, 0, "empty command")
	}
	if st, err := os.Stat(cwd); err != nil || !st.IsDir() {
		return fail(wire.CodeBadCwd, unix.ENOTDIR, fmt.Sprintf("working directory %s does not exist", cwd))
	}
	if err := unix.Chdir(cwd); err != nil {
		return fail(wire.CodeBadCwd, errnoOf(err), fmt.Sprintf("working directory %s: %v", cwd, err))
	}
	env := os.Environ()
	prog, errno := execpath.Look(argv[0], env)
	if errno != 0 {
		return failStart(fail, argv[0], errno)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return fail(wire.CodeNoResources, errnoOf(err), fmt.Sprintf("pipe: %v", err))
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return fail(wire.CodeNoResources, errnoOf(err), fmt.Sprintf("pipe: %v", err))
	}
	files := []uintptr{0, outW.Fd(), errW.Fd()}
	execProg, execArgv := prog, argv
	var statusR, statusW *os.File
	if nproc > 0 {
		// The command gets RLIMIT_NPROC through the limit trampoline, not
		// from the front: runsc (2022-12) gives every exec'd process the
		// very rlimit set of the container's process, so a setrlimit here
		// would limit the agent and every other front too.
		if statusR, statusW, err = os.Pipe(); err != nil {
			return fail(wire.CodeNoResources, errnoOf(err), fmt.Sprintf("pipe: %v", err))
		}
		files = append(files, statusW.Fd())
		execProg = wire.HelperPath
		execArgv = append([]string{wire.HelperPath, wire.ModeLimit, strconv.FormatUint(nproc, 10), prog}, argv...)
	}
	// A new session: the command leads its own process group, which the
	// agent kills as a whole on timeout. It also has no controlling
	// terminal to share with anyone. Its stdin is the front's own.
	pid, err := syscall.ForkExec(execProg, execArgv, &syscall.ProcAttr{
		Env:   env,
		Files: files,
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	outW.Close()
	errW.Close()
	if statusW != nil {
		statusW.Close()
	}
	if err != nil {
		if errno := errnoOf(err); errno == unix.EAGAIN || errno == unix.ENOMEM {
			return fail(wire.CodeNoResources, errno, fmt.Sprintf("%s: cannot start a process: %v", argv[0], err))
		}
		return failStart(fail, argv[0], errnoOf(err))
	}
	if statusR != nil {
		// The trampoline closes its end at the command's execve, or
		// reports why the command could not start.
		report, _ := io.ReadAll(io.LimitReader(statusR, 64)) // an errno, at most
		statusR.Close()
		if len(report) > 0 {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, 0, nil)
			errno, _ := strconv.Atoi(strings.TrimSpace(string(report)))
			if errno == int(unix.EAGAIN) || errno == int(unix.ENOMEM) {
				return fail(wire.CodeNoResources, syscall.Errno(errno), fmt.Sprintf("%s: cannot start a process: %v", argv[0], syscall.Errno(errno)))
			}
			return failStart(fail, argv[0], syscall.Errno(errno))
		}
	}
	fmt.Fprintf(stderr, "%sstarted %d\n", marker, pid)

	var copiers sync.WaitGroup
	copiers.Add(2)
	go copyOut(&copiers, stdout, outR)
	go copyOut(&copiers, stderr, errR)
	outputEnded := make(chan struct{})
	go func() {
		copiers.Wait()
		close(outputEnded)
	}()
	var ws syscall.WaitStatus
	delay := pollMin
	for {
		wpid, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if wpid == pid {
			break
		}
		if err != nil && err != syscall.EINTR {
			fmt.Fprintf(stderr, "ironclaw: oci helper exec: waiting for the command: %v\n", err)
			return wire.HelperExitRefused
		}
		t := time.NewTimer(delay)
		select {
		case <-outputEnded:
			// The command closed its output: it is exiting, most likely.
			outputEnded, delay = nil, pollMin
		case <-t.C:
			delay = min(2*delay, pollMax)
		}
		t.Stop()
	}
	by := time.Now().Add(afterExit)
	_ = outR.SetReadDeadline(by)
	_ = errR.SetReadDeadline(by)
	copiers.Wait()
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return 128 + int(syscall.SIGKILL)
}

// limitMain is the trampoline between the exec front and a command that
// must run under RLIMIT_NPROC: args are the limit, the program's path and
// its argv. Forked by the front, it has an rlimit set of its own; it sets
// the limit (soft and hard, so the command cannot raise it) and execve's
// the program. Its fd 3 reports to the front: closed at a successful
// execve, or the errno in decimal.
func limitMain(args []string) int {
	status := os.NewFile(3, "status")
	syscall.CloseOnExec(3)
	report := func(errno syscall.Errno) int {
		fmt.Fprintf(status, "%d", int(errno))
		if errno == unix.ENOENT {
			return 127
		}
		return 126
	}
	if len(args) < 3 {
		return report(unix.EINVAL)
	}
	n, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil || n == 0 {
		return report(unix.EINVAL)
	}
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}); err != nil {
		return report(errnoOf(err))
	}
	err = syscall.Exec(args[1], args[2:], os.Environ())
	return report(errnoOf(err))
}

// pollable returns fd as a file the Go poller serves (non-blocking), or as
// a plain blocking one if it cannot be.
func pollable(fd int, name string) *os.File {
	_ = syscall.SetNonblock(fd, true)
	return os.NewFile(uintptr(fd), name) // pollable when non-blocking
}

// copyOut copies the command's output to the front's until EOF or the
// read deadline, then drains what the pipe holds at that moment without
// waiting (sandbox.DrainPipe, as the native init does).
func copyOut(wg *sync.WaitGroup, dst io.Writer, src *os.File) {
	defer wg.Done()
	defer src.Close()
	if _, err := io.Copy(dst, src); errors.Is(err, os.ErrDeadlineExceeded) {
		sandbox.DrainPipe(src, dst)
	}
}

func failStart(fail func(string, syscall.Errno, string) int, name string, errno syscall.Errno) int {
	code := wire.CodeNotExecutable
	if errno == unix.ENOENT {
		code = wire.CodeNotFound
	}
	return fail(code, errno, fmt.Sprintf("%s: %v", name, errno))
}

func errnoOf(err error) syscall.Errno {
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	return unix.EINVAL
}
