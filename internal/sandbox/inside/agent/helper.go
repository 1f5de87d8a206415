// Package agent is what runs inside a container sandbox (the OCI runtimes'
// and Docker's): the ironclaw binary itself, bind-mounted read-only into
// every such sandbox at wire.HelperPath and started by the container
// runtime (never by a user on the host). Its host side is package
// container.
//
// It has one mode per job, chosen by os.Args[1]:
//
//	agent   pid 1 of the container: reaps zombies, ignores signals sent from
//	        inside, serves the exposed ports (127.0.0.1:port inside, forwarded
//	        to the daemon's unix sockets under SockDir), and kills process
//	        groups (or, for the daemon's memory watch on runsc, the largest
//	        process) when the daemon asks over its control connection. It
//	        exits when the daemon hangs up, which ends the sandbox. On runsc
//	        it first prepares the sentry's /dev and cgroup view and drops
//	        the capabilities it was started with for that (GVisorSetupFlag).
//	exec    the front of every command: it raises its oom_score_adj to
//	        sandbox.WorkloadOOMScoreAdj (the command and its children are the
//	        OOM killer's first choice), working directory, PATH lookup, then
//	        it forks the command into a new session with pipes of its own,
//	        reports "started <pid>" or why the command could not start as one
//	        marked line on stderr (see Header), copies the command's output
//	        until it exits (plus a short drain) and exits with its status.
//	limit   the exec front's trampoline when the command must run under
//	        RLIMIT_NPROC (runsc): sets it and execve's the command.
//	gate-exec
//	        the front of an approved exec of a gated program: the agent,
//	        which holds the real program, starts it (see gate.go).
//	write, read, list
//	        file operations confined beneath /workspace or /tmp with openat2
//	        RESOLVE_BENEATH, run with the sandbox's own identity and view;
//	        writes are atomic, special files refused (package files).
//	probe   prints the seal it runs under (runtime.New's probe container).
//
// main (through inside.Main, and TestMain in tests) must call Main when
// IsHelper reports true, before doing anything else. Every mode refuses to
// run unless it is sealed: uid 65532, no effective capabilities,
// no_new_privs (the agent on runsc once it has dropped its setup
// capabilities); the agent moreover only as pid 1 of its own pid
// namespace.
package agent

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"github.com/ironclaw/ironclaw/internal/seccomp"
	"golang.org/x/sys/unix"
)

// IsHelper reports whether this process was started as the in-sandbox
// helper.
func IsHelper() bool { return len(os.Args) > 1 && os.Args[0] == wire.HelperPath }

// Main runs the helper mode named by os.Args[1] and never returns.
func Main() {
	if os.Args[1] == wire.ModeAgent && len(os.Args) > 2 && strings.HasPrefix(os.Args[2], wire.GVisorSetupFlag) {
		// runsc only, before the seal is checked: see GVisorSetupFlag.
		if err := gvisorSetup(strings.TrimPrefix(os.Args[2], wire.GVisorSetupFlag)); err != nil {
			fmt.Fprintf(os.Stderr, "ironclaw: oci agent refused to run: preparing the gVisor sandbox: %v\n", err)
			os.Exit(wire.HelperExitRefused)
		}
		os.Args = append(os.Args[:2], os.Args[3:]...)
	}
	if err := checkSealed(); err != nil {
		fmt.Fprintf(os.Stderr, "ironclaw: oci helper refused to run: %v\n", err)
		os.Exit(wire.HelperExitRefused)
	}
	if err := ensureSeccomp(); err != nil {
		fmt.Fprintf(os.Stderr, "ironclaw: oci helper refused to run: %v\n", err)
		os.Exit(wire.HelperExitRefused)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case wire.ModeAgent:
		os.Exit(agentMain(args))
	case wire.ModeExec:
		os.Exit(execMain(args))
	case wire.ModeLimit:
		os.Exit(limitMain(args))
	case wire.ModeGateExec:
		os.Exit(gateExecMain(args))
	case wire.ModeWrite, wire.ModeRead, wire.ModeList:
		os.Exit(fileMain(os.Args[1], args))
	case wire.ModeProbe:
		os.Exit(probeMain())
	}
	fmt.Fprintf(os.Stderr, "ironclaw: oci helper: unknown mode %q\n", os.Args[1])
	os.Exit(wire.HelperExitRefused)
}

// checkSealed refuses to run outside a sealed sandbox: on the host, as
// root, or with any effective capability.
func checkSealed() error {
	if os.Getuid() != sandbox.UID || os.Geteuid() != sandbox.UID || os.Getgid() != sandbox.GID {
		return fmt.Errorf("uid %d gid %d, want %d:%d; this entry is started only by the IronClaw oci runtime", os.Getuid(), os.Getgid(), sandbox.UID, sandbox.GID)
	}
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil || nnp != 1 {
		return errors.New("no_new_privs is not set")
	}
	caps, err := capabilities()
	if err != nil {
		return err
	}
	if caps.effective != 0 || caps.permitted != 0 {
		return fmt.Errorf("capabilities are held (effective %#x, permitted %#x)", caps.effective, caps.permitted)
	}
	return nil
}

// ensureSeccomp installs the native backend's filter (internal/seccomp)
// when no filter is in force. runc and crun apply the OCI profile to every
// process they start, but runsc applies it to the container's first
// process only, not to what `runsc exec` starts; the helper is the front
// of every exec and file operation, so this closes that gap on every
// runtime. Under an existing filter nothing is added.
func ensureSeccomp() error {
	mode, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("reading the seccomp mode: %w", err)
	}
	if mode != 0 {
		return nil
	}
	return seccomp.Install()
}

type capSets struct{ effective, permitted, inheritable uint64 }

func capabilities() (capSets, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return capSets{}, fmt.Errorf("capget: %w", err)
	}
	join := func(lo, hi uint32) uint64 { return uint64(lo) | uint64(hi)<<32 }
	return capSets{
		effective:   join(data[0].Effective, data[1].Effective),
		permitted:   join(data[0].Permitted, data[1].Permitted),
		inheritable: join(data[0].Inheritable, data[1].Inheritable),
	}, nil
}

// probeMain prints what the daemon's probe container checks: identity,
// capabilities, no_new_privs and the seccomp mode, one "key value" a line.
func probeMain() int {
	caps, err := capabilities()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	nnp, _ := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	mode, _ := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	var b strings.Builder
	fmt.Fprintf(&b, "uid %d\ngid %d\npid %d\n", os.Getuid(), os.Getgid(), os.Getpid())
	fmt.Fprintf(&b, "cap_eff %#x\ncap_prm %#x\ncap_inh %#x\n", caps.effective, caps.permitted, caps.inheritable)
	fmt.Fprintf(&b, "no_new_privs %d\nseccomp %d\n", nnp, mode)
	os.Stdout.WriteString(b.String())
	return 0
}
