package boot

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/ironclaw/ironclaw/internal/landlock"
	"github.com/ironclaw/ironclaw/internal/sandbox/setup"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"github.com/ironclaw/ironclaw/internal/seccomp"
	"golang.org/x/sys/unix"
)

// applySeal removes every privilege the init still has, on every thread,
// as cfg.Seal says, in the only order that works: the bounding set needs
// CAP_SETPCAP, so it goes before the uid change; landlock needs
// no_new_privs; seccomp comes last so the filter does not have to allow
// the setup calls.
func applySeal(cfg *wire.Config) error {
	sl := &cfg.Seal
	if len(sl.Capabilities) != 0 || !sl.NoNewPrivs {
		return errors.New("the native init only seals: no capability, and no_new_privs")
	}
	for _, rl := range sl.Rlimits {
		res, ok := setup.Rlimits[rl.Name]
		if !ok {
			return fmt.Errorf("rlimit %s: not known to the native init", rl.Name)
		}
		// syscall.Setrlimit (not unix) so the Go runtime stops restoring its
		// own RLIMIT_NOFILE in children.
		if err := syscall.Setrlimit(res, &syscall.Rlimit{Cur: rl.Value, Max: rl.Value}); err != nil {
			return fmt.Errorf("rlimit %s: %w", rl.Name, err)
		}
	}
	last, err := capLastCap()
	if err != nil {
		return err
	}
	// The bounding set is emptied on this thread, the one every command is
	// forked from (see agent.onMain); the agent's other threads never
	// exec, and lose every other capability set below. Doing it on every
	// thread costs one stop-the-world per capability, ~8ms per sandbox.
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if os.Getuid() != sl.UID || os.Getgid() != sl.GID {
		// Root mode: uid 0 here is an unprivileged host uid; become the
		// sandbox user with no supplementary groups (Go applies these on
		// every thread).
		if err := syscall.Setgroups(nil); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
		if err := syscall.Setresgid(sl.GID, sl.GID, sl.GID); err != nil {
			return fmt.Errorf("setresgid: %w", err)
		}
		if err := syscall.Setresuid(sl.UID, sl.UID, sl.UID); err != nil {
			return fmt.Errorf("setresuid: %w", err)
		}
	}
	// Clear permitted, effective and inheritable sets everywhere (a uid
	// change clears only the first two, and rootless mode keeps its uid);
	// the kernel drops every ambient capability that is no longer both
	// permitted and inheritable, so this clears the ambient set too.
	//
	// Each call made on every thread stops the world and signals each of
	// the runtime's threads, 0.1-10 ms on a busy two-core VM, so what
	// needs only the main thread is done there: no_new_privs reaches the
	// other threads with the landlock and seccomp filters (both set it on
	// each thread they synchronise), and the death signal is sent when
	// any thread of ours has it set. verifySealed reads every thread back.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capset: %w", allThreadsErr(e))
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	// A uid change resets these two: not dumpable keeps same-uid code from
	// reading our memory or stealing our descriptors; the death signal ties
	// us to the daemon thread that started us.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("dumpable: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("pdeathsig: %w", err)
	}
	st, err := landlock.Restrict(sl.Landlock)
	if err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	if cfg.RequireLandlock && st.ABI == 0 {
		return errors.New("landlock is required but this kernel does not provide it")
	}
	if err := seccomp.Install(); err != nil {
		return err // already says "seccomp:"
	}
	return verifySealed()
}

// verifySealed reads back what the kernel says about every thread: a seal
// that did not take must stop the sandbox, not run commands.
func verifySealed() error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		main := t.Name() == strconv.Itoa(os.Getpid())
		if err := verifyThread("/proc/self/task/"+t.Name()+"/status", main); err != nil {
			return fmt.Errorf("thread %s: %w", t.Name(), err)
		}
	}
	return nil
}

func verifyThread(status string, main bool) error {
	f, err := os.Open(status)
	if err != nil {
		return err
	}
	defer f.Close()
	want := map[string]string{
		"CapInh:": "0000000000000000", "CapPrm:": "0000000000000000", "CapEff:": "0000000000000000",
		"CapAmb:": "0000000000000000", "NoNewPrivs:": "1", "Seccomp:": "2",
	}
	if main {
		want["CapBnd:"] = "0000000000000000"
	}
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 {
			continue
		}
		if w, ok := want[fields[0]]; ok {
			if fields[1] != w {
				return fmt.Errorf("seal check: %s is %s, want %s", fields[0], fields[1], w)
			}
			delete(want, fields[0])
		}
	}
	if len(want) > 0 {
		return fmt.Errorf("seal check: /proc/self/status lacks %d fields", len(want))
	}
	return nil
}

func allThreadsErr(e syscall.Errno) error {
	if e == syscall.ENOTSUP {
		return errors.New("per-thread security calls need a binary built with CGO_ENABLED=0")
	}
	return e
}

func capLastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("cap_last_cap: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("cap_last_cap: %w", err)
	}
	return n, nil
}
