package oci_test

import (
	"fmt"
	"strconv"

	"github.com/ironclaw/ironclaw/internal/testutil/int80"
	"golang.org/x/sys/unix"
)

// runProbe is the test binary's third life: run inside a sandbox, it tries
// one thing with exact system calls and prints what the kernel (or the
// sentry) answered, for the test to judge.
func runProbe(name string, args []string) int {
	switch name {
	case "syscalls":
		calls := []struct {
			name string
			nr   uintptr
			a    [6]uintptr
		}{
			{"unshare", unix.SYS_UNSHARE, [6]uintptr{unix.CLONE_NEWUSER}},
			{"mount", unix.SYS_MOUNT, [6]uintptr{}},
			{"setns", unix.SYS_SETNS, [6]uintptr{^uintptr(0)}},
			{"clone3", unix.SYS_CLONE3, [6]uintptr{}},
			{"clone_newuser", unix.SYS_CLONE, [6]uintptr{unix.CLONE_NEWUSER | uintptr(unix.SIGCHLD)}},
			{"keyctl", unix.SYS_KEYCTL, [6]uintptr{}},
			{"bpf", unix.SYS_BPF, [6]uintptr{}},
			{"ptrace", unix.SYS_PTRACE, [6]uintptr{unix.PTRACE_TRACEME}},
			{"ioctl_tiocsti", unix.SYS_IOCTL, [6]uintptr{0, unix.TIOCSTI | 1<<32}},
			{"socket_mptcp", unix.SYS_SOCKET, [6]uintptr{unix.AF_INET, unix.SOCK_STREAM, 262}},
		}
		for _, c := range calls {
			r, _, e := unix.RawSyscall6(c.nr, c.a[0], c.a[1], c.a[2], c.a[3], c.a[4], c.a[5])
			if c.nr == unix.SYS_CLONE && r == 0 && e == 0 {
				unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0) // the child, if the filter failed
			}
			fmt.Printf("%s %s\n", c.name, errnoName(e))
		}
	case "int80": // i386 keyctl through int $0x80: the arch guard must kill us
		if !int80.HasInt80 {
			fmt.Println("unsupported")
			return 0
		}
		r := int80.Int80(288)
		fmt.Println("survived", int64(r))
	default:
		fmt.Println("unknown probe", name)
		return 2
	}
	return 0
}

func errnoName(e unix.Errno) string {
	if e == 0 {
		return "OK"
	}
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return strconv.Itoa(int(e))
}
