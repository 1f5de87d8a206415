// Package boot is the child stage of the native backend: the code that runs
// as pid 1 inside a new sandbox. The daemon starts it by re-executing its
// own binary with argv[0] set to Arg0; main (and TestMain in tests) must
// call Main when IsInit reports true, before doing anything else.
//
// The stages, in order (see package wire for the messages):
//  1. refuse to run unless this process is pid 1 of fresh user and pid
//     namespaces that map nothing to host root: run by mistake on the host,
//     the mount steps below would shadow the host's own directories;
//  2. read the Config; check the id maps again, which the daemon writes
//     only once this process has started (the native backend's idmap.go),
//     and become uid 0 of the namespace where that is mapped; enter a
//     cgroup namespace (cgroup v1), build the new root (masking the gated
//     programs, whose real files pid 1 keeps: see gaterun.go; with a /sys
//     holding only the sandbox's own cgroups, read-only) and pivot_root
//     into it, bring up lo, take the affinity of the CPUs the Config names
//     (the CPU count commands see), open pid 1's oom_score_adj so each
//     command can start above it;
//  3. seal: rlimits, drop every capability and the bounding set, switch to
//     uid/gid 65532 with no groups, no_new_privs, not dumpable, landlock,
//     and seccomp last; all of it on every thread, so every command forked
//     later inherits the same seal;
//  4. serve requests until the daemon hangs up, then exit (which kills
//     every process left in the sandbox's pid namespace). Where the daemon
//     sent a steward (package steward), pid 1 becomes it once ready and
//     comes back as this agent (Resume) only for what the steward does
//     not serve. Commands are
//     forked from the main thread only; on cgroup v1 the daemon puts that
//     thread (alone, once the init is ready) into the pids cgroup's
//     workload child, so what they fork cannot take the tasks reserved for
//     pid 1's other threads.
package boot

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox/inside/steward"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

// Arg0 is the argv[0] the daemon gives the sandbox init. It is not a
// subcommand name so that no flag parser or user can reach it by accident.
const Arg0 = "ironclaw-sandbox-init"

// ctlFD is the socketpair end the daemon passes as the first ExtraFile.
const ctlFD = 3

// ExitRefused is the exit status when the init refuses to run.
const ExitRefused = 125

func init() {
	if IsInit() {
		// unshare, capabilities and cgroup namespaces act per thread;
		// every fork happens from this (the main) thread.
		runtime.LockOSThread()
	}
}

// IsInit reports whether this process was started as a sandbox init, or
// resumed as pid 1 by the steward.
func IsInit() bool {
	return len(os.Args) > 0 && (os.Args[0] == Arg0 || os.Args[0] == steward.ResumeArg0)
}

// Main runs the sandbox init and never returns.
func Main() {
	if os.Args[0] == steward.ResumeArg0 {
		resume()
	}
	if err := checkFreshNamespaces(ctlFD); err != nil {
		fmt.Fprintf(os.Stderr, "ironclaw: sandbox init refused to run: %v\n", err)
		os.Exit(ExitRefused)
	}
	// Whatever the runtime's parent leaked to us must not reach commands.
	_ = unix.CloseRange(ctlFD+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	ignoreSignals()
	conn, err := wire.NewConn(os.NewFile(ctlFD, "ctl"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "ironclaw: sandbox init: %v\n", err)
		os.Exit(1)
	}
	var cfg wire.Config
	trees, err := conn.Recv(&cfg)
	if err != nil {
		os.Exit(1)
	}
	if err := checkUserNamespace(); err != nil {
		fmt.Fprintf(os.Stderr, "ironclaw: sandbox init refused to run: %v\n", err)
		os.Exit(ExitRefused)
	}
	var workloadTasks *os.File
	if cfg.WorkloadTasks && len(trees) > 0 {
		workloadTasks, trees = trees[len(trees)-1], trees[:len(trees)-1]
	}
	var progs *programs
	if cfg.Steward && len(trees) > 0 {
		var stewardExe *os.File
		stewardExe, trees = trees[len(trees)-1], trees[:len(trees)-1]
		progs = keepPrograms(&cfg, stewardExe)
	}
	listeners, err := setUp(&cfg, trees)
	wire.CloseAll(trees)
	if err != nil {
		_ = conn.Send(wire.Reply{Op: wire.OpFailed, Err: err.Error()})
		os.Exit(1)
	}
	if workloadTasks != nil {
		// This (the main, forking) thread alone moves into the pids
		// workload cgroup. A kernel that refuses is not fatal: the daemon
		// checks, and moves the thread itself.
		_, _ = workloadTasks.WriteString("0")
		workloadTasks.Close()
	}
	// The daemon serves the exposed ports on these; pid 1 keeps no copy.
	err = conn.Send(wire.Reply{Op: wire.OpReady}, listeners...)
	wire.CloseAll(listeners)
	if err != nil {
		os.Exit(1)
	}
	go settle()
	after := steward.FirstHandover
	if cfg.StewardAfter > 0 {
		after = cfg.StewardAfter
	}
	serve(conn, nil, progs, time.Now().Add(after))
	os.Exit(0)
}

// settleDelay is how long after it is ready pid 1 gives its set-up's
// memory back: late enough not to delay a first command that follows at
// once, early enough that a pooled or idle sandbox is charged only for
// what it keeps.
const settleDelay = 200 * time.Millisecond

// settle returns the heap the set-up left behind (decoded config, file
// trees, the seal's programs) to the kernel: an idle sandbox's cgroup is
// charged for every page pid 1 ever touched until it is given back.
func settle() {
	time.Sleep(settleDelay)
	debug.FreeOSMemory()
}

// checkFreshNamespaces refuses to continue unless we are pid 1 of a new pid
// namespace, the control socket is where it should be, and the user
// namespace maps nothing to host root. It has no side effects. The daemon
// writes the id maps only once we have started (see the native backend's
// idmap.go), so they may still be missing here: checkUserNamespace, once
// the Config has come, requires them.
func checkFreshNamespaces(ctl int) error {
	if os.Getpid() != 1 {
		return fmt.Errorf("not pid 1 of a new pid namespace (pid %d); this entry is started only by the IronClaw runtime", os.Getpid())
	}
	if _, _, err := readUIDMap(); err != nil {
		return err
	}
	typ, err := unix.GetsockoptInt(ctl, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil || typ != unix.SOCK_SEQPACKET {
		return fmt.Errorf("descriptor %d is not the runtime's control socket", ctl)
	}
	return nil
}

// checkUserNamespace, run once the daemon has sent the Config (it writes
// the maps before), refuses an empty uid map or one that maps host root,
// and makes us uid and gid 0 of the namespace where 0 is mapped (root
// mode): we executed before the maps existed, as no uid of ours, and the
// root under construction must be made by a uid it knows. Rootless, the
// daemon's uid is already the sandbox user.
func checkUserNamespace() error {
	lines, mapsZero, err := readUIDMap()
	if err != nil {
		return err
	}
	if lines == 0 {
		return errors.New("the user namespace has no uid map")
	}
	if !mapsZero || os.Getuid() == 0 {
		return nil
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(0, 0, 0); err != nil {
		return fmt.Errorf("setresgid: %w", err)
	}
	if err := syscall.Setresuid(0, 0, 0); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	return nil
}

// readUIDMap reads our uid map, refuses one that maps host root, and
// says how many lines it has and whether one maps uid 0 here.
func readUIDMap() (lines int, mapsZero bool, err error) {
	m, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return 0, false, fmt.Errorf("cannot read uid_map: %w", err)
	}
	for line := range strings.Lines(string(m)) {
		f := strings.Fields(line) // inside, outside, count
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			return 0, false, fmt.Errorf("unexpected uid_map line %q", line)
		}
		if f[1] == "0" {
			return 0, false, fmt.Errorf("user namespace maps host root (uid_map %q); refusing", strings.TrimSpace(line))
		}
		lines++
		mapsZero = mapsZero || f[0] == "0"
	}
	return lines, mapsZero, nil
}

// ignoreSignals keeps code inside the sandbox from killing its pid 1. The
// kernel drops a signal sent from inside to a pid-namespace init unless the
// init handles it, and the Go runtime handles nearly all of them: most with
// a no-op, but these exit, dump or panic. Catching them (not SIG_IGN, which
// every command would inherit across exec) sends them to a channel nobody
// reads. Each Notify costs a round trip to the runtime's signal thread, so
// the list holds only what would otherwise end us.
func ignoreSignals() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGILL, syscall.SIGTRAP,
		syscall.SIGABRT, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGSEGV, syscall.SIGTERM, syscall.SIGSTKFLT, syscall.SIGSYS)
	go func() {
		for range c {
		}
	}()
}
