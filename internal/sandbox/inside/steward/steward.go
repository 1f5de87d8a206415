// Package steward is the Go side of a native sandbox's small pid 1: the
// handover between the Go agent (inside/boot) and ironclaw-steward, a
// single-threaded C program (csrc/steward.c) that takes pid 1's place
// while the sandbox only runs commands.
//
// A Go pid 1 keeps its runtime: 5-7 threads (each a task against the
// pids limit and kernel.pid_max) and about 1.7 MiB charged to the
// sandbox, idle or not. The steward is one thread and a few pages. It
// does not replace the Go agent: the agent builds the root, seals the
// process and serves what only it serves (file operations, gated runs);
// the steward serves exec and signal requests and reports exits. The two
// take turns as pid 1 by execve, which keeps the pid, the seal, the
// children and the descriptors not marked close-on-exec:
//
//	Go init: set up, seal, "ready"; FirstHandover later --execve--> steward (exec, signal)
//	steward: a request it does not serve, left unread --execve--> Go agent
//	Go agent: answers it; idle for IdleBeforeSteward --execve--> steward
//
// What passes across each execve is the Handover, as command-line
// arguments: the descriptors (the control socket, both programs' files,
// pid 1's oom_score_adj file) and the commands running with their exec
// IDs. The daemon notices none of it: both programs speak the same
// messages (package wire) on the same socket, and a request is never read
// by the one that hands it over.
//
// Both programs are opened before the root is replaced and stay
// executable through landlock rules on their descriptors
// (landlock.Rules.ExecFiles); no path inside the sandbox leads to them,
// and pid 1 is not dumpable, so its descriptors are not reachable
// through /proc either. Each execve happens on the main thread, the one
// every command is forked from, whose bounding set is empty and whose
// landlock domain the commands share; the steward checks the seal is
// there (no_new_privs, seccomp, no capabilities) and refuses to run
// otherwise: it seals nothing itself.
//
// One cost of the design: on cgroup v1 the steward is the main thread,
// which lives in the pids cgroup's workload child (see native's
// reservePids), so a Go agent it resumes starts its threads there too. A
// workload that holds every one of its pids then keeps the agent from
// starting, and the file operation that needed it ends the sandbox
// (pid 1 exits) instead of being served from the reserve.
//
// Started by the daemon with argv[0] "ironclaw-steward-init"
// (the default; native.Options.GoInit turns it off), the steward is the sandbox's init as well
// (csrc/setup.c): it refuses unless it is pid 1 of fresh user and pid
// namespaces that do not map host root, reads the plan the daemon
// compiled (package setup), builds the root and seals itself from it,
// reports ready and serves; no Go runtime runs in the sandbox until a
// file operation asks for the Go agent.
//
// A sandbox with gated programs keeps the Go agent throughout: the
// steward holds no gate table. Without the steward's binary (a `go
// install` of the CLI), every sandbox keeps the Go agent, as before.
package steward

import (
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Source is the steward's C source (steward.c), for builds that have a C
// compiler but not the built binary (the tests compile it with cc);
// SetupSource and Header are its other two files.
//
//go:embed csrc/steward.c
var Source []byte

//go:embed csrc/setup.c
var SetupSource []byte

//go:embed csrc/steward.h
var Header []byte

// ResumeArg0 is the argv[0] the steward gives the Go agent when it hands
// pid 1 back.
const ResumeArg0 = "ironclaw-sandbox-resume"

// IdleBeforeSteward is how long the Go agent, resumed for a request only it
// serves, waits for another before it hands pid 1 back to the steward
// (commands it starts meanwhile do not count: the steward serves those
// too): a burst of file operations is served by one start of the Go agent
// (about 3-5 ms), an idle sandbox is charged only the steward's pages.
const IdleBeforeSteward = 2 * time.Second

// FirstHandover is how long after "ready" the Go init hands pid 1 to the
// steward: the execve (the Go runtime's threads and address space torn
// down, the steward started) costs about 1.5 ms, which a create's first
// command, sent at once, would otherwise wait for; a pooled sandbox is a
// steward long before it is handed out.
const FirstHandover = 250 * time.Millisecond

// Run is a command pid 1 started and has not reaped: its process (and
// process group) and the daemon's exec ID.
type Run struct {
	Pid int
	ID  uint64
}

// OOM is pid 1's oom_score_adj file and the two values it toggles
// between around each fork.
type OOM struct {
	FD            int
	Own, Workload string
}

// Handover is what one pid 1 program passes the next across execve.
type Handover struct {
	Ctl     int // the control socket
	Steward int // the steward's executable (O_PATH)
	Agent   int // the Go agent's executable (O_PATH)
	OOM     *OOM
	Runs    []Run
}

// FDs are the descriptors the next program must inherit.
func (h *Handover) FDs() []int {
	fds := []int{h.Ctl, h.Steward, h.Agent}
	if h.OOM != nil {
		fds = append(fds, h.OOM.FD)
	}
	return fds
}

// Args are h as the arguments after argv[0] (the format csrc/steward.c
// parses and writes).
func (h *Handover) Args() []string {
	a := []string{"ctl=" + strconv.Itoa(h.Ctl), "steward=" + strconv.Itoa(h.Steward), "agent=" + strconv.Itoa(h.Agent)}
	if h.OOM != nil {
		a = append(a, fmt.Sprintf("oom=%d:%s:%s", h.OOM.FD, h.OOM.Own, h.OOM.Workload))
	}
	for _, r := range h.Runs {
		a = append(a, fmt.Sprintf("run=%d:%d", r.Pid, r.ID))
	}
	return a
}

// ErrHandover is wrapped by every error of Parse.
var ErrHandover = errors.New("steward: bad handover")

// Parse reads the arguments after argv[0].
func Parse(args []string) (*Handover, error) {
	h := &Handover{Ctl: -1, Steward: -1, Agent: -1}
	fd := func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%w: descriptor %q", ErrHandover, s)
		}
		return n, nil
	}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return nil, fmt.Errorf("%w: argument %q", ErrHandover, a)
		}
		var err error
		switch k {
		case "ctl":
			h.Ctl, err = fd(v)
		case "steward":
			h.Steward, err = fd(v)
		case "agent":
			h.Agent, err = fd(v)
		case "oom":
			f := strings.Split(v, ":")
			if len(f) != 3 {
				return nil, fmt.Errorf("%w: oom %q", ErrHandover, v)
			}
			o := &OOM{Own: f[1], Workload: f[2]}
			if o.FD, err = fd(f[0]); err == nil {
				if _, e1 := strconv.Atoi(o.Own); e1 != nil {
					err = fmt.Errorf("%w: oom %q", ErrHandover, v)
				} else if _, e2 := strconv.Atoi(o.Workload); e2 != nil {
					err = fmt.Errorf("%w: oom %q", ErrHandover, v)
				}
			}
			h.OOM = o
		case "run":
			p, id, ok := strings.Cut(v, ":")
			pid, e1 := strconv.Atoi(p)
			n, e2 := strconv.ParseUint(id, 10, 64)
			if !ok || e1 != nil || e2 != nil || pid <= 0 {
				return nil, fmt.Errorf("%w: run %q", ErrHandover, v)
			}
			h.Runs = append(h.Runs, Run{Pid: pid, ID: n})
		default:
			return nil, fmt.Errorf("%w: argument %q", ErrHandover, a)
		}
		if err != nil {
			return nil, err
		}
	}
	if h.Ctl < 0 || h.Steward < 0 || h.Agent < 0 {
		return nil, fmt.Errorf("%w: ctl, steward and agent are required", ErrHandover)
	}
	return h, nil
}

// Exec replaces this process with the program open at fd (execveat with
// AT_EMPTY_PATH), after clearing close-on-exec on keep. It returns only
// on failure, with close-on-exec set on keep again. It must run on the
// main thread (see the package doc); the caller holds whatever keeps other
// goroutines from starting work that would be cut short.
func Exec(fd int, argv0 string, args []string, env []string, keep []int) error {
	argv, err := syscall.SlicePtrFromStrings(append([]string{argv0}, args...))
	if err != nil {
		return err
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return err
	}
	empty, err := unix.BytePtrFromString("")
	if err != nil {
		return err
	}
	for _, k := range keep {
		if _, err := unix.FcntlInt(uintptr(k), unix.F_SETFD, 0); err != nil {
			restoreCloexec(keep)
			return fmt.Errorf("steward: keep descriptor %d: %w", k, err)
		}
	}
	_, _, errno := unix.Syscall6(unix.SYS_EXECVEAT, uintptr(fd), uintptr(unsafe.Pointer(empty)),
		uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envp[0])), unix.AT_EMPTY_PATH, 0)
	restoreCloexec(keep)
	return fmt.Errorf("steward: execveat: %w", errno)
}

func restoreCloexec(fds []int) {
	for _, k := range fds {
		_, _ = unix.FcntlInt(uintptr(k), unix.F_SETFD, unix.FD_CLOEXEC)
	}
}
