package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/cli/flagtypes"
	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/rootfs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/backend"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

type runArgs struct {
	runtime       string
	image         string
	memory        string
	pids          int64
	cpus          float64
	timeout       time.Duration
	output        string
	workspaceSize string
	tmpSize       string
	openFiles     int64
	env           []string
	workspace     string
	mounts        []string
	tty           bool
	verbose       bool
}

func newRunCmd(e *env) *cobra.Command {
	var a runArgs
	c := &cobra.Command{
		Use:   "run [flags] -- CMD [ARGS...]",
		Short: "Run one command in a new sealed sandbox, then tear it down",
		Long: `Run one command in a new sealed sandbox and tear the sandbox down afterwards.
No daemon is needed. Output is streamed, stdin is forwarded, and ironclaw exits
with the command's exit code: 125 for an IronClaw error, 126 when the command
cannot be executed, 127 when it is not found, 137 when a limit killed it.

The default root is the host-toolchain view: read-only /usr, /bin, /sbin, /lib*
and a synthetic /etc. /workspace (the working directory and HOME) and /tmp are
the only writable places. There is no network but loopback.`,
		Example: `  ironclaw run -- sh -c 'id; ls /'
  ironclaw run --memory 256M --timeout 10s -- python3 script.py
  ironclaw run --workspace "$PWD/out" -- sh -c 'echo hi > /workspace/hello'
  ironclaw run --tty -- bash`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("run needs a command: ironclaw run [flags] -- CMD [ARGS...]")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error { return runRun(c.Context(), e, a, args) },
	}
	f := c.Flags()
	f.SetInterspersed(false) // everything after CMD belongs to CMD
	d := sandbox.DefaultLimits
	f.StringVar(&a.runtime, "runtime", backend.Native, "sandbox backend: "+strings.Join(backend.Names(), ", ")+" (the OCI runtimes need their binary installed)")
	f.StringVar(&a.image, "image", "", "root filesystem (default: the host-toolchain view): a directory, an OCI layout directory or tarball, a docker-save tarball (an argument starting with /, . or ~, or an existing path), or a registry reference such as ghcr.io/org/app:1")
	f.StringVar(&a.memory, "memory", sandbox.FormatBytes(d.MemoryBytes), "memory limit, tmpfs pages included (e.g. 256M, 1G)")
	f.Int64Var(&a.pids, "pids", d.Pids, "maximum number of processes and threads")
	f.Float64Var(&a.cpus, "cpus", d.CPUs, "CPU bandwidth in CPUs (e.g. 0.5)")
	flagtypes.Duration(f, &a.timeout, "timeout", "", d.Timeout, "wall-time limit for the command")
	f.StringVar(&a.output, "output", sandbox.FormatBytes(d.OutputBytes), "stdout+stderr bytes kept; the rest is dropped and reported")
	f.StringVar(&a.workspaceSize, "workspace-size", "", "size of the private /workspace (default "+sandbox.FormatBytes(d.WorkspaceBytes)+", less if that does not fit --memory)")
	f.StringVar(&a.tmpSize, "tmp-size", "", "size of /tmp (default "+sandbox.FormatBytes(d.TmpBytes)+", less if that does not fit --memory)")
	f.Int64Var(&a.openFiles, "open-files", d.OpenFiles, "open file limit (RLIMIT_NOFILE)")
	f.StringArrayVarP(&a.env, "env", "e", nil, "set KEY=VALUE inside (repeatable); nothing of the host's environment passes in")
	f.StringVar(&a.workspace, "workspace", "", "bind this host directory read-write at /workspace (files are created as the sandbox's mapped uid)")
	f.StringArrayVar(&a.mounts, "mount", nil, "bind SRC:DST[:ro] from the host (DST a new top-level dir or under /workspace or /tmp; repeatable)")
	f.BoolVarP(&a.tty, "tty", "t", false, "run on a terminal allocated inside the sandbox")
	f.BoolVarP(&a.verbose, "verbose", "v", false, "log sandbox diagnostics to stderr")
	return c
}

// spec turns flags into a Spec; every error here happens before anything
// is created.
func (a runArgs) spec() (sandbox.Spec, error) {
	var s sandbox.Spec
	var err error
	size := func(flag, v string) int64 {
		if err != nil {
			return 0
		}
		var n int64
		if v == "" {
			return 0 // unset: the sandbox's default, which fits the memory limit
		}
		n, err = sandbox.ParseBytes(v)
		if err != nil {
			err = fmt.Errorf("--%s: %v", flag, err)
		}
		return n
	}
	s.Limits = sandbox.Limits{
		MemoryBytes:    size("memory", a.memory),
		Pids:           a.pids,
		CPUs:           a.cpus,
		Timeout:        a.timeout,
		OutputBytes:    size("output", a.output),
		WorkspaceBytes: size("workspace-size", a.workspaceSize),
		TmpBytes:       size("tmp-size", a.tmpSize),
		OpenFiles:      a.openFiles,
	}
	if err != nil {
		return s, err
	}
	// Every other limit has a flag default, so a zero there was asked for;
	// unset tmpfs sizes are chosen at create to fit the memory limit.
	check := s.Limits
	check.WorkspaceBytes, check.TmpBytes = max(check.WorkspaceBytes, 1), max(check.TmpBytes, 1)
	if err := check.Validate(); err != nil {
		return s, err
	}
	if a.workspace != "" {
		abs, err := filepath.Abs(a.workspace)
		if err != nil {
			return s, err
		}
		s.Workspace = abs
	}
	for _, m := range a.mounts {
		parts := strings.Split(m, ":")
		if len(parts) < 2 || len(parts) > 3 || (len(parts) == 3 && parts[2] != "ro" && parts[2] != "rw") {
			return s, fmt.Errorf("--mount %q: want SRC:DST or SRC:DST:ro", m)
		}
		src, err := filepath.Abs(parts[0])
		if err != nil {
			return s, err
		}
		s.Mounts = append(s.Mounts, sandbox.Mount{Source: src, Target: parts[1], ReadOnly: len(parts) == 3 && parts[2] == "ro"})
	}
	s.Env = a.env
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		return s, err
	}
	return s, nil
}

// warmRun begins, in the background, the one read of the host that a
// one-shot run's first native plan waits for: the alternatives links
// under /usr/bin (1.5-3.5 ms in a new process on this project's guest,
// where the runtime used to begin it only as it opened). Begun as soon as
// the command line says run, it overlaps the flags, the signals and the
// runtime's checks. The scan is kept in the user's cache directory
// (hostViewCacheFile) and taken from there while the directories it read
// are unchanged, so most runs only stat five directories
// (rootfs.WarmHostViewCached; measured in docs/performance.md). A run
// that turns out not to need it (--image, an OCI runtime) has done that
// for nothing. The native runtime is opened then too (earlyRuntime).
func (e *env) warmRun() {
	go rootfs.WarmHostViewCached("/", hostViewCacheFile())
	e.early = openEarly(func(logf func(string, ...any)) (sandbox.Runtime, error) {
		return backend.Open(context.Background(), backend.Options{Name: backend.Native, Logf: logf})
	})
}

// hostViewCacheFile is where one-shot runs keep the host view's scan:
// $XDG_CACHE_HOME/ironclaw, else ~/.cache/ironclaw.
func hostViewCacheFile() string {
	return filepath.Join(defaults.UserDir("XDG_CACHE_HOME", ".cache"), "host-view-alternatives")
}

// earlyRuntime is the native runtime a one-shot run opens as soon as the
// command line says run (warmRun), before its flags are parsed: the
// opening's host checks (0.5 ms on this project's guest) overlap the
// parsing. What it logs is held until the run claims it and knows
// whether it is verbose. A run whose flags name another backend, or
// that ends before it claims it, closes it unused (execute's discard).
type earlyRuntime struct {
	done chan struct{}
	rt   sandbox.Runtime
	err  error

	mu   sync.Mutex
	held []string             // logged before the claim, at most maxHeld
	sink func(string, ...any) // set by the claim
}

// maxHeld bounds the lines an early runtime holds before its claim.
const maxHeld = 64

// openEarly begins open in the background.
func openEarly(open func(logf func(string, ...any)) (sandbox.Runtime, error)) *earlyRuntime {
	er := &earlyRuntime{done: make(chan struct{})}
	go func() {
		defer close(er.done)
		er.rt, er.err = open(er.logf)
	}()
	return er
}

func (er *earlyRuntime) logf(format string, args ...any) {
	er.mu.Lock()
	defer er.mu.Unlock()
	if er.sink != nil {
		er.sink(format, args...)
	} else if len(er.held) < maxHeld {
		er.held = append(er.held, fmt.Sprintf(format, args...))
	}
}

// claim waits for the opening and returns the runtime, the lines held
// replayed to logf and the later ones sent there; nil if the opening
// failed (the caller opens one itself, and meets the error again).
func (er *earlyRuntime) claim(logf func(string, ...any)) sandbox.Runtime {
	<-er.done
	if er.err != nil {
		return nil
	}
	er.mu.Lock()
	defer er.mu.Unlock()
	for _, l := range er.held {
		logf("%s", l)
	}
	er.held, er.sink = nil, logf
	return er.rt
}

// discard waits for the opening and closes what it opened.
func (er *earlyRuntime) discard() {
	<-er.done
	if er.err == nil {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = er.rt.Close(cctx)
	}
}

// discardEarly closes the early runtime if it was not claimed.
func (e *env) discardEarly() {
	if e.early != nil {
		e.early.discard()
		e.early = nil
	}
}

// openRuntime is the runtime a run uses: the early one when the run
// wants the native backend, else one opened now.
func (e *env) openRuntime(ctx context.Context, name string, logf func(string, ...any)) (sandbox.Runtime, error) {
	if er := e.early; er != nil {
		e.early = nil
		if name == backend.Native {
			if rt := er.claim(logf); rt != nil {
				return rt, nil
			}
		} else {
			er.discard()
		}
	}
	return backend.Open(ctx, backend.Options{Name: name, Logf: logf})
}

// runRun runs argv in a new sandbox. ctx is the root context: a signal
// ends the command and tears the sandbox down before we exit, instead of
// leaving it to the kernel.
func runRun(ctx context.Context, e *env, a runArgs, argv []string) error {
	spec, err := a.spec()
	if err != nil {
		return err
	}
	if a.image != "" {
		ref, err := imageArg(a.image)
		if err != nil {
			return err
		}
		if e.full == nil {
			e.discardEarly()
			return e.delegate(ctx, "run --image") // images need the registry client
		}
		if spec.Root, err = e.full.ResolveImage(ctx, ref); err != nil {
			return err
		}
	}

	logf := func(string, ...any) {}
	if a.verbose {
		logf = func(format string, args ...any) { fmt.Fprintf(e.stderr, "ironclaw: "+format+"\n", args...) }
	}
	rt, err := e.openRuntime(ctx, a.runtime, logf)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Close(cctx); err != nil {
			fmt.Fprintf(e.stderr, "ironclaw: teardown: %v\n", err)
		}
	}()
	req := sandbox.ExecRequest{Argv: argv, Stdin: e.stdin, Stdout: e.stdout, Stderr: e.stderr, TTY: a.tty}
	if a.tty {
		restore, resize := hostTerminal(e, &req)
		defer restore()
		defer resize()
	}
	sb, res, err := createExec(ctx, rt, spec, req)
	if sb != nil {
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = sb.Destroy(cctx)
		}()
	}
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(e.stderr, "ironclaw: interrupted; sandbox torn down")
			return exitCode(ExitInterrupted)
		}
		return err
	}
	l := spec.Limits
	if res.Truncated {
		fmt.Fprintf(e.stderr, "ironclaw: output truncated: %d bytes produced, %s kept (--output)\n",
			res.StdoutBytes+res.StderrBytes, sandbox.FormatBytes(l.OutputBytes))
	}
	if res.TimedOut {
		fmt.Fprintf(e.stderr, "ironclaw: killed: the command ran past its %v wall-time limit (--timeout)\n", l.Timeout)
	}
	if res.OOMKilled {
		fmt.Fprintf(e.stderr, "ironclaw: a process was killed at the %s memory limit (--memory)\n", sandbox.FormatBytes(l.MemoryBytes))
	}
	return exitCode(res.ExitCode)
}

// firstExecer is a runtime that can hand a new sandbox its first command
// while building it (the native runtime's CreateExec): the command starts
// as soon as the sandbox is sealed.
type firstExecer interface {
	CreateExec(ctx context.Context, spec sandbox.Spec, req sandbox.ExecRequest) (sandbox.Sandbox, sandbox.ExecResult, error)
}

// createExec makes a sandbox and runs its one command: in one step where
// rt can, else Create then Exec. sb is set whenever a sandbox was made.
func createExec(ctx context.Context, rt sandbox.Runtime, spec sandbox.Spec, req sandbox.ExecRequest) (sb sandbox.Sandbox, res sandbox.ExecResult, err error) {
	if fe, ok := rt.(firstExecer); ok {
		return fe.CreateExec(ctx, spec, req)
	}
	if sb, err = rt.Create(ctx, spec); err != nil {
		return nil, res, err
	}
	res, err = sb.Exec(ctx, req)
	return sb, res, err
}

// hostTerminal puts our own terminal in raw mode (when stdin is one) and
// forwards window size changes. It returns undo functions.
func hostTerminal(e *env, req *sandbox.ExecRequest) (restore, stopResize func()) {
	restore, stopResize = func() {}, func() {}
	in, ok := e.stdin.(*os.File)
	if !ok {
		return
	}
	fd := int(in.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return // not a terminal: the sandbox still gets one of its own
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err == nil {
		restore = func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }
	}
	if ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); err == nil {
		req.WindowSize = sandbox.WindowSize{Rows: ws.Row, Cols: ws.Col}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGWINCH)
	ch := make(chan sandbox.WindowSize, 1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-sig:
				if ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); err == nil {
					select {
					case ch <- sandbox.WindowSize{Rows: ws.Row, Cols: ws.Col}:
					default:
					}
				}
			case <-done:
				return
			}
		}
	}()
	req.Resize = ch
	stopResize = func() { signal.Stop(sig); close(done) }
	return
}
