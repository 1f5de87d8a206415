package native_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"github.com/ironclaw/ironclaw/internal/testutil/int80"
	"golang.org/x/sys/unix"
)

// runProbe is the test binary's third life: run inside a sandbox at
// /probe, it tries one escape with exact system calls and prints what the
// kernel answered, one result per line, for the test to judge.
func runProbe(name string, args []string) int {
	switch name {
	case "noop":
	case "connect": // connect NETWORK ADDRESS
		c, err := net.DialTimeout(args[0], args[1], 2*time.Second)
		if err != nil {
			fmt.Println("error:", err)
			return 0
		}
		c.Close()
		fmt.Println("connected")
	case "listen": // listen tcp ADDRESS
		l, err := net.Listen(args[0], args[1])
		if err != nil {
			fmt.Println("error:", err)
			return 0
		}
		l.Close()
		fmt.Println("listening")
	case "serve": // serve tcp ADDRESS: print "serving", then answer each connection "inside:" + its first line
		l, err := net.Listen(args[0], args[1])
		if err != nil {
			fmt.Println("error:", err)
			return 0
		}
		fmt.Println("serving")
		for {
			c, err := l.Accept()
			if err != nil {
				return 0
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				fmt.Fprintf(c, "inside:%s", line)
			}()
		}
	case "syscalls":
		for _, c := range deniedCalls() {
			r, _, e := unix.RawSyscall6(c.nr, c.a[0], c.a[1], c.a[2], c.a[3], c.a[4], c.a[5])
			if c.nr == unix.SYS_CLONE && r == 0 && e == 0 {
				unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0) // the child, if the filter failed
			}
			fmt.Printf("%s %s\n", c.name, errnoName(e))
		}
	case "int80": // i386 keyctl through int $0x80: the arch guard must kill us
		r := int80.Int80(288)
		fmt.Println("survived", int64(r))
	case "x32":
		_, _, e := unix.RawSyscall(unix.SYS_GETPID|0x40000000, 0, 0, 0)
		fmt.Println("survived", errnoName(e))
	case "fds":
		des, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		for _, d := range des {
			fd, _ := strconv.Atoi(d.Name())
			target, err := os.Readlink("/proc/self/fd/" + d.Name())
			if err != nil {
				continue // ReadDir's own descriptor, closed by now
			}
			fmt.Println(fd, target)
		}
	case "tiocsti": // push a key into our own stdin terminal
		c := byte('x')
		_, _, e := unix.Syscall(unix.SYS_IOCTL, 0, unix.TIOCSTI, uintptr(unsafe.Pointer(&c)))
		fmt.Println("TIOCSTI", errnoName(e))
	case "userns":
		fmt.Println("unshare", errnoName(unix.Unshare(unix.CLONE_NEWUSER)))
		_, _, e := unix.RawSyscall(unix.SYS_CLONE, unix.CLONE_NEWUSER|uintptr(unix.SIGCHLD), 0, 0)
		if e == 0 {
			unix.Exit(0) // in the unlikely child: leave at once
		}
		fmt.Println("clone", errnoName(e))
	case "alloc": // alloc MiB: allocate and touch memory
		mib, _ := strconv.Atoi(args[0])
		var keep [][]byte
		for i := 0; i < mib; i++ {
			b := make([]byte, 1<<20)
			for j := 0; j < len(b); j += 4096 {
				b[j] = 1
			}
			keep = append(keep, b)
		}
		fmt.Println("allocated", len(keep))
	case "signal-init": // every catchable signal to pid 1, then prove it lives
		for s := 1; s <= 64; s++ {
			if s == int(unix.SIGKILL) || s == int(unix.SIGSTOP) {
				continue
			}
			_ = unix.Kill(1, unix.Signal(s))
		}
		_ = unix.Kill(1, unix.SIGKILL)
		time.Sleep(100 * time.Millisecond)
		fmt.Println("sent")
	case "read": // read PATH
		b, err := os.ReadFile(args[0])
		if err != nil {
			fmt.Println("error:", err)
			return 0
		}
		fmt.Printf("read %d bytes\n", len(b))
	case "mptcp":
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 262)
		if err == nil {
			unix.Close(fd)
		}
		fmt.Println("mptcp", errnoName(err))
	default:
		fmt.Fprintln(os.Stderr, "unknown probe", name)
		return 2
	}
	return 0
}

type call struct {
	name string
	nr   uintptr
	a    [6]uintptr
}

// deniedCalls are the seccomp denials the containment tests try for real,
// each with arguments that would otherwise succeed or fail differently.
func deniedCalls() []call {
	str := func(s string) uintptr { p, _ := unix.BytePtrFromString(s); return uintptr(unsafe.Pointer(p)) }
	return []call{
		{"mount", unix.SYS_MOUNT, [6]uintptr{str("none"), str("/tmp"), str("tmpfs")}},
		{"umount2", unix.SYS_UMOUNT2, [6]uintptr{str("/tmp"), unix.MNT_DETACH}},
		{"pivot_root", unix.SYS_PIVOT_ROOT, [6]uintptr{str("/tmp"), str("/tmp")}},
		{"chroot", unix.SYS_CHROOT, [6]uintptr{str("/tmp")}},
		{"unshare", unix.SYS_UNSHARE, [6]uintptr{unix.CLONE_NEWNS}},
		{"setns", unix.SYS_SETNS, [6]uintptr{0, 0}},
		{"ptrace", unix.SYS_PTRACE, [6]uintptr{unix.PTRACE_TRACEME}},
		{"process_vm_readv", unix.SYS_PROCESS_VM_READV, [6]uintptr{1}},
		{"process_vm_writev", unix.SYS_PROCESS_VM_WRITEV, [6]uintptr{1}},
		{"bpf", unix.SYS_BPF, [6]uintptr{0}},
		{"perf_event_open", unix.SYS_PERF_EVENT_OPEN, [6]uintptr{0, 0, ^uintptr(0), ^uintptr(0)}},
		{"keyctl", unix.SYS_KEYCTL, [6]uintptr{0}},
		{"add_key", unix.SYS_ADD_KEY, [6]uintptr{str("user"), str("k"), 0, 0, ^uintptr(1)}},
		{"request_key", unix.SYS_REQUEST_KEY, [6]uintptr{str("user"), str("k")}},
		{"userfaultfd", unix.SYS_USERFAULTFD, [6]uintptr{unix.O_CLOEXEC}},
		{"io_uring_setup", unix.SYS_IO_URING_SETUP, [6]uintptr{1, 0}},
		{"io_uring_enter", unix.SYS_IO_URING_ENTER, [6]uintptr{^uintptr(0)}},
		{"io_uring_register", unix.SYS_IO_URING_REGISTER, [6]uintptr{^uintptr(0)}},
		{"kexec_load", unix.SYS_KEXEC_LOAD, [6]uintptr{}},
		{"kexec_file_load", unix.SYS_KEXEC_FILE_LOAD, [6]uintptr{^uintptr(0), ^uintptr(0)}},
		{"init_module", unix.SYS_INIT_MODULE, [6]uintptr{}},
		{"finit_module", unix.SYS_FINIT_MODULE, [6]uintptr{^uintptr(0)}},
		{"delete_module", unix.SYS_DELETE_MODULE, [6]uintptr{str("nope")}},
		{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT, [6]uintptr{^uintptr(0)}},
		{"name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT, [6]uintptr{^uintptr(0)}},
		{"iopl", unix.SYS_IOPL, [6]uintptr{3}},
		{"ioperm", unix.SYS_IOPERM, [6]uintptr{0, 1, 1}},
		{"reboot", unix.SYS_REBOOT, [6]uintptr{0}},
		{"swapon", unix.SYS_SWAPON, [6]uintptr{str("/tmp/x")}},
		{"swapoff", unix.SYS_SWAPOFF, [6]uintptr{str("/tmp/x")}},
		{"settimeofday", unix.SYS_SETTIMEOFDAY, [6]uintptr{}},
		{"clock_settime", unix.SYS_CLOCK_SETTIME, [6]uintptr{}},
		{"clock_adjtime", unix.SYS_CLOCK_ADJTIME, [6]uintptr{}},
		{"adjtimex", unix.SYS_ADJTIMEX, [6]uintptr{}},
		{"acct", unix.SYS_ACCT, [6]uintptr{}},
		{"quotactl", unix.SYS_QUOTACTL, [6]uintptr{}},
		{"syslog", unix.SYS_SYSLOG, [6]uintptr{3}},
		{"pidfd_getfd", unix.SYS_PIDFD_GETFD, [6]uintptr{^uintptr(0)}},
		{"fsopen", unix.SYS_FSOPEN, [6]uintptr{str("tmpfs")}},
		{"open_tree", unix.SYS_OPEN_TREE, [6]uintptr{^uintptr(0)}},
		{"move_mount", unix.SYS_MOVE_MOUNT, [6]uintptr{^uintptr(0)}},
		{"mount_setattr", unix.SYS_MOUNT_SETATTR, [6]uintptr{^uintptr(0)}},
		{"clone3", unix.SYS_CLONE3, [6]uintptr{}},
		{"clone_newns", unix.SYS_CLONE, [6]uintptr{unix.CLONE_NEWNS | uintptr(unix.SIGCHLD)}},
		{"clone_newnet", unix.SYS_CLONE, [6]uintptr{unix.CLONE_NEWNET | uintptr(unix.SIGCHLD)}},
	}
}

func errnoName(err error) string {
	if err == nil {
		return "ok"
	}
	if e, ok := err.(syscall.Errno); ok {
		if e == 0 {
			return "ok"
		}
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
	}
	return err.Error()
}
