package seccomp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	probe "github.com/ironclaw/ironclaw/internal/testutil/int80"
)

// The filter cannot be removed once installed, so the test process never
// installs it. Live tests re-execute the test binary with probeEnv naming a
// probe; TestMain in that child sets no_new_privs, calls Install (unless
// noFilterEnv is "1", which gives the unfiltered baseline), runs the probe
// and prints its result on lines starting with resultPrefix.
const (
	probeEnv     = "IRONCLAW_SECCOMP_PROBE"
	noFilterEnv  = "IRONCLAW_SECCOMP_NOFILTER"
	resultPrefix = "RESULT "
)

func TestMain(m *testing.M) {
	if name := os.Getenv(probeEnv); name != "" {
		os.Exit(runProbe(name))
	}
	os.Exit(m.Run())
}

// ---------------------------------------------------------------------------
// Program structure.

func nativeAuditArch(t *testing.T) uint32 {
	t.Helper()
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64
	}
	t.Skipf("no filter for %s", runtime.GOARCH)
	return 0
}

func program(t *testing.T) []unix.SockFilter {
	t.Helper()
	prog, err := Program()
	if err != nil {
		t.Fatalf("Program: %v", err)
	}
	return prog
}

func disassemble(prog []unix.SockFilter) string {
	var b strings.Builder
	for i, ins := range prog {
		fmt.Fprintf(&b, "%3d: code=%#04x jt=%d jf=%d k=%#x\n", i, ins.Code, ins.Jt, ins.Jf, ins.K)
	}
	return b.String()
}

func TestProgramArchGuard(t *testing.T) {
	arch := nativeAuditArch(t)
	prog := program(t)
	want := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 4}, // seccomp_data.arch
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 1, Jf: 0, K: arch},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_KILL_PROCESS},
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
		{Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, Jt: 0, Jf: 1, K: 0x40000000},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_KILL_PROCESS},
	}
	if len(prog) < len(want) || !slices.Equal(prog[:len(want)], want) {
		t.Fatalf("program does not start with the arch and x32 guards:\n%s", disassemble(prog[:min(len(prog), 8)]))
	}
}

// checkJumps is written independently of validate: every jump must land on
// an instruction of the program, and the program must end in a return.
func checkJumps(t *testing.T, prog []unix.SockFilter) {
	t.Helper()
	if len(prog) == 0 || len(prog) >= 4096 {
		t.Fatalf("program has %d instructions, want 1..4095", len(prog))
	}
	for i, ins := range prog {
		if ins.Code&0x07 != unix.BPF_JMP {
			continue
		}
		targets := []int{i + 1 + int(ins.Jt), i + 1 + int(ins.Jf)}
		if ins.Code&0xf0 == unix.BPF_JA {
			targets = []int{i + 1 + int(ins.K)}
		}
		for _, to := range targets {
			if to >= len(prog) {
				t.Errorf("instruction %d jumps to %d, past the end (%d instructions)", i, to, len(prog))
			}
		}
	}
	if last := prog[len(prog)-1]; last.Code != unix.BPF_RET|unix.BPF_K {
		t.Errorf("last instruction %+v is not RET K", last)
	}
}

func TestProgramJumpsInRange(t *testing.T) {
	nativeAuditArch(t)
	t.Run("real", func(t *testing.T) {
		prog := program(t)
		checkJumps(t, prog)
		t.Logf("%d instructions", len(prog))
	})
	t.Run("long deny list", func(t *testing.T) {
		// Far more rules than 255 instructions: a layout with jumps
		// spanning several rules would overflow its 8-bit offsets here.
		var rs []rule
		for nr := uint32(1000); nr < 1600; nr++ {
			rs = append(rs, rule{sysname: sysname{fmt.Sprint("sys", nr), nr}, action: retEPERM})
		}
		rs = append(rs, rule{
			sysname: sysname{"argful", 2000},
			action:  retEPERM,
			match:   &argMatch{arg: 2, anyBit: 0x10, equals: []uint32{7, 8, 9}},
		})
		prog, err := build(unix.AUDIT_ARCH_X86_64, rs)
		if err != nil {
			t.Fatal(err)
		}
		checkJumps(t, prog)
		for nr := int32(990); nr < 1610; nr++ {
			want := uint32(retAllow)
			if nr >= 1000 && nr < 1600 {
				want = retEPERM
			}
			if got := mustEvaluate(t, prog, seccompData{nr: nr, arch: unix.AUDIT_ARCH_X86_64}); got != want {
				t.Errorf("nr %d: got %#x, want %#x", nr, got, want)
			}
		}
		for _, tc := range []struct {
			nr   int32
			arg2 uint64
			want uint32
		}{
			{1000, 0, retEPERM}, {1599, 0, retEPERM}, {1600, 0, retAllow}, {999, 0, retAllow},
			{2000, 0x10, retEPERM}, {2000, 9, retEPERM}, {2000, 7, retEPERM}, {2000, 6, retAllow},
		} {
			d := seccompData{nr: tc.nr, arch: unix.AUDIT_ARCH_X86_64}
			d.args[2] = tc.arg2
			if got := mustEvaluate(t, prog, d); got != tc.want {
				t.Errorf("nr %d arg2 %#x: got %#x, want %#x", tc.nr, tc.arg2, got, tc.want)
			}
		}
	})
	t.Run("refuses what it cannot encode", func(t *testing.T) {
		many := make([]uint32, 300)
		for i := range many {
			many[i] = uint32(i)
		}
		for name, rs := range map[string][]rule{
			"block too long": {{sysname: sysname{"x", 1}, action: retEPERM, match: &argMatch{arg: 0, equals: many}}},
			"bad argument":   {{sysname: sysname{"x", 1}, action: retEPERM, match: &argMatch{arg: 6, anyBit: 1}}},
			"duplicate":      {{sysname: sysname{"x", 1}, action: retEPERM}, {sysname: sysname{"y", 1}, action: retEPERM}},
		} {
			if prog, err := build(unix.AUDIT_ARCH_X86_64, rs); err == nil {
				t.Errorf("%s: build succeeded with %d instructions", name, len(prog))
			}
		}
	})
}

// The kernel runs the filter once per system-call number as it installs
// it (to cache the calls it may always allow), so install time grows
// with the paths' length: every number's path must be that of a search
// tree over the rules, not of a chain through them.
func TestProgramPathsAreShort(t *testing.T) {
	arch := nativeAuditArch(t)
	prog := program(t)
	spec, err := currentArch()
	if err != nil {
		t.Fatal(err)
	}
	n := len(rules(spec))
	// The guards (4 run), then about three instructions per halving of
	// the rules (a node's one or two, a leaf's tests), then a matching
	// block's argument load, tests and return. A chain runs one test per
	// rule.
	bound := 4 + 3*bits.Len(uint(n)) + 9
	longest, at := 0, 0
	for nr := int32(0); nr < 1024; nr++ {
		steps, err := pathLength(prog, seccompData{nr: nr, arch: arch})
		if err != nil {
			t.Fatalf("nr %d: %v", nr, err)
		}
		if steps > longest {
			longest, at = steps, int(nr)
		}
	}
	t.Logf("%d rules, %d instructions; the longest path is %d instructions (nr %d), bound %d", n, len(prog), longest, at, bound)
	if longest > bound {
		t.Fatalf("system call %d runs %d instructions of the filter, more than a search tree over %d rules needs (%d)", at, longest, n, bound)
	}
}

// pathLength is how many instructions the filter runs for d.
func pathLength(prog []unix.SockFilter, d seccompData) (int, error) {
	_, steps, err := run(prog, d)
	return steps, err
}

// seccompData mirrors struct seccomp_data; bytes lays it out the way the
// kernel hands it to the filter.
type seccompData struct {
	nr   int32
	arch uint32
	args [6]uint64
}

func (d seccompData) bytes() []byte {
	b := make([]byte, 64)
	binary.LittleEndian.PutUint32(b[0:], uint32(d.nr))
	binary.LittleEndian.PutUint32(b[4:], d.arch)
	for i, a := range d.args {
		binary.LittleEndian.PutUint64(b[16+8*i:], a)
	}
	return b
}

// evaluate runs prog the way the kernel would, for the instructions a
// seccomp filter built by this package may contain.
func evaluate(prog []unix.SockFilter, d seccompData) (uint32, error) {
	action, _, err := run(prog, d)
	return action, err
}

// run is evaluate that also counts the instructions run.
func run(prog []unix.SockFilter, d seccompData) (action uint32, steps int, err error) {
	mem := d.bytes()
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		steps++
		ins := prog[pc]
		var cond bool
		switch ins.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			if ins.K%4 != 0 || int(ins.K)+4 > len(mem) {
				return 0, steps, fmt.Errorf("pc %d: load from offset %d", pc, ins.K)
			}
			a = binary.LittleEndian.Uint32(mem[ins.K:])
			continue
		case unix.BPF_RET | unix.BPF_K:
			return ins.K, steps, nil
		case unix.BPF_ALU | unix.BPF_AND | unix.BPF_K:
			a &= ins.K
			continue
		case unix.BPF_JMP | unix.BPF_JA:
			pc += int(ins.K)
			continue
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			cond = a == ins.K
		case unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K:
			cond = a >= ins.K
		case unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K:
			cond = a > ins.K
		case unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			cond = a&ins.K != 0
		default:
			return 0, steps, fmt.Errorf("pc %d: unexpected opcode %#x", pc, ins.Code)
		}
		if cond {
			pc += int(ins.Jt)
		} else {
			pc += int(ins.Jf)
		}
	}
	return 0, steps, errors.New("ran off the end of the program")
}

func mustEvaluate(t *testing.T, prog []unix.SockFilter, d seccompData) uint32 {
	t.Helper()
	got, err := evaluate(prog, d)
	if err != nil {
		t.Fatalf("evaluate(%+v): %v", d, err)
	}
	return got
}

// commonDeniedNumbers is the brief's list, spelt out independently of the
// package's own table so that a wrong number there shows up here.
func commonDeniedNumbers() map[string]uintptr {
	return map[string]uintptr{
		"mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2, "move_mount": unix.SYS_MOVE_MOUNT,
		"open_tree": unix.SYS_OPEN_TREE, "fsopen": unix.SYS_FSOPEN, "fsconfig": unix.SYS_FSCONFIG,
		"fsmount": unix.SYS_FSMOUNT, "fspick": unix.SYS_FSPICK, "mount_setattr": unix.SYS_MOUNT_SETATTR,
		"pivot_root": unix.SYS_PIVOT_ROOT, "chroot": unix.SYS_CHROOT, "unshare": unix.SYS_UNSHARE,
		"setns": unix.SYS_SETNS, "ptrace": unix.SYS_PTRACE, "process_vm_readv": unix.SYS_PROCESS_VM_READV,
		"process_vm_writev": unix.SYS_PROCESS_VM_WRITEV, "bpf": unix.SYS_BPF,
		"perf_event_open": unix.SYS_PERF_EVENT_OPEN, "add_key": unix.SYS_ADD_KEY,
		"request_key": unix.SYS_REQUEST_KEY, "keyctl": unix.SYS_KEYCTL, "userfaultfd": unix.SYS_USERFAULTFD,
		"io_uring_setup": unix.SYS_IO_URING_SETUP, "io_uring_enter": unix.SYS_IO_URING_ENTER,
		"io_uring_register": unix.SYS_IO_URING_REGISTER, "kexec_load": unix.SYS_KEXEC_LOAD,
		"kexec_file_load": unix.SYS_KEXEC_FILE_LOAD, "init_module": unix.SYS_INIT_MODULE,
		"finit_module": unix.SYS_FINIT_MODULE, "delete_module": unix.SYS_DELETE_MODULE,
		"open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT, "name_to_handle_at": unix.SYS_NAME_TO_HANDLE_AT,
		"reboot": unix.SYS_REBOOT, "swapon": unix.SYS_SWAPON, "swapoff": unix.SYS_SWAPOFF,
		"settimeofday": unix.SYS_SETTIMEOFDAY, "clock_settime": unix.SYS_CLOCK_SETTIME,
		"clock_adjtime": unix.SYS_CLOCK_ADJTIME, "adjtimex": unix.SYS_ADJTIMEX, "acct": unix.SYS_ACCT,
		"quotactl": unix.SYS_QUOTACTL, "quotactl_fd": unix.SYS_QUOTACTL_FD,
		"lookup_dcookie": unix.SYS_LOOKUP_DCOOKIE, "syslog": unix.SYS_SYSLOG,
		"pidfd_getfd": unix.SYS_PIDFD_GETFD, "fanotify_init": unix.SYS_FANOTIFY_INIT,
		"nfsservctl": unix.SYS_NFSSERVCTL,
	}
}

// archOnlyDenied are the brief's calls that exist on some architectures only.
func archOnlyDenied() []string {
	if runtime.GOARCH == "amd64" {
		return []string{"iopl", "ioperm", "uselib", "_sysctl", "create_module", "get_kernel_syms", "query_module"}
	}
	return nil
}

// numbers maps every rule's name to its number, from the package's table.
func numbers(t *testing.T) map[string]uint32 {
	t.Helper()
	spec, err := currentArch()
	if err != nil {
		t.Skip(err)
	}
	m := map[string]uint32{}
	for _, r := range rules(spec) {
		m[r.name] = r.nr
	}
	return m
}

func TestDeniedList(t *testing.T) {
	nativeAuditArch(t)
	denied := Denied()
	if !slices.IsSorted(denied) {
		t.Errorf("Denied() is not sorted: %v", denied)
	}
	if len(slices.Compact(slices.Clone(denied))) != len(denied) {
		t.Errorf("Denied() has duplicates: %v", denied)
	}
	nrs := numbers(t)
	for name, nr := range commonDeniedNumbers() {
		if !slices.Contains(denied, name) {
			t.Errorf("Denied() lacks %s", name)
		}
		if uintptr(nrs[name]) != nr {
			t.Errorf("%s is number %d in the filter, want %d", name, nrs[name], nr)
		}
	}
	for _, name := range append(archOnlyDenied(), "clone3", "open_tree_attr") {
		if !slices.Contains(denied, name) {
			t.Errorf("Denied() lacks %s", name)
		}
	}
	for _, name := range []string{"clone", "ioctl", "read", "execve"} {
		if slices.Contains(denied, name) {
			t.Errorf("Denied() lists %s, which must stay allowed (at least for some arguments)", name)
		}
	}
	restricted := Restricted()
	var names []string
	for _, r := range restricted {
		name, _, _ := strings.Cut(r, ":")
		names = append(names, name)
	}
	want := []string{"clone", "ioctl", "mknodat", "socket"}
	if runtime.GOARCH == "amd64" {
		want = []string{"clone", "ioctl", "mknod", "mknodat", "socket"}
	}
	if !slices.Equal(names, want) {
		t.Errorf("Restricted() = %q, want rules for %v", restricted, want)
	}
	t.Logf("denied: %s", strings.Join(denied, " "))
	t.Logf("restricted: %q", restricted)
}

// atFDCWD is AT_FDCWD as the 64-bit register the kernel hands the filter.
const atFDCWD = uint64(1<<64 - 100)

func TestProgramDecisions(t *testing.T) {
	arch := nativeAuditArch(t)
	prog := program(t)
	nrs := numbers(t)

	type tc struct {
		name string
		d    seccompData
		want uint32
	}
	call := func(nr uintptr, args ...uint64) seccompData {
		d := seccompData{nr: int32(nr), arch: arch}
		copy(d.args[:], args)
		return d
	}
	var cases []tc
	for _, name := range Denied() {
		want := uint32(retEPERM)
		if name == "clone3" {
			want = retENOSYS
		}
		cases = append(cases, tc{"denied/" + name, call(uintptr(nrs[name])), want})
	}
	for name, nr := range commonDeniedNumbers() {
		cases = append(cases, tc{"brief/" + name, call(nr), retEPERM})
	}
	for name, nr := range map[string]uintptr{
		"read": unix.SYS_READ, "write": unix.SYS_WRITE, "openat": unix.SYS_OPENAT,
		"close": unix.SYS_CLOSE, "mmap": unix.SYS_MMAP, "execve": unix.SYS_EXECVE,
		"wait4": unix.SYS_WAIT4, "futex": unix.SYS_FUTEX, "exit_group": unix.SYS_EXIT_GROUP,
		"getpid": unix.SYS_GETPID, "pidfd_open": unix.SYS_PIDFD_OPEN,
		"pidfd_send_signal": unix.SYS_PIDFD_SEND_SIGNAL, "waitid": unix.SYS_WAITID,
		"accept4": unix.SYS_ACCEPT4, "rt_sigaction": unix.SYS_RT_SIGACTION, "prctl": unix.SYS_PRCTL,
		"seccomp": unix.SYS_SECCOMP, "kill": unix.SYS_KILL, "statmount": unix.SYS_STATMOUNT,
		"listmount": unix.SYS_LISTMOUNT,
	} {
		cases = append(cases, tc{"allowed/" + name, call(nr, 0xffffffffffffffff, 0x5412, 0x5412), retAllow})
	}

	const sigchld = uint64(unix.SIGCHLD)
	for _, f := range []struct {
		name string
		flag uint64
	}{
		{"NEWNS", unix.CLONE_NEWNS}, {"NEWCGROUP", unix.CLONE_NEWCGROUP}, {"NEWUTS", unix.CLONE_NEWUTS},
		{"NEWIPC", unix.CLONE_NEWIPC}, {"NEWUSER", unix.CLONE_NEWUSER}, {"NEWPID", unix.CLONE_NEWPID},
		{"NEWNET", unix.CLONE_NEWNET}, {"NEWTIME", unix.CLONE_NEWTIME},
	} {
		cases = append(cases,
			tc{"clone/" + f.name, call(unix.SYS_CLONE, f.flag|sigchld), retEPERM},
			tc{"clone/" + f.name + " with junk in high word", call(unix.SYS_CLONE, f.flag|sigchld|0xffffffff00000000), retEPERM},
			// The kernel ignores the high word, so a flag there
			// creates no namespace and must not be refused.
			tc{"clone/" + f.name + " in high word only", call(unix.SYS_CLONE, f.flag<<32|sigchld), retAllow},
			tc{"clone/" + f.name + " in second argument", call(unix.SYS_CLONE, sigchld, f.flag), retAllow},
		)
	}
	cases = append(cases,
		tc{"clone/fork (glibc)", call(unix.SYS_CLONE, unix.CLONE_CHILD_SETTID|unix.CLONE_CHILD_CLEARTID|sigchld), retAllow},
		tc{"clone/vfork+pidfd (Go os/exec)", call(unix.SYS_CLONE, unix.CLONE_VM|unix.CLONE_VFORK|unix.CLONE_PIDFD|sigchld), retAllow},
		tc{"clone/thread (Go runtime)", call(unix.SYS_CLONE, unix.CLONE_VM|unix.CLONE_FS|unix.CLONE_FILES|
			unix.CLONE_SIGHAND|unix.CLONE_SYSVSEM|unix.CLONE_THREAD), retAllow},
		tc{"clone/thread (glibc)", call(unix.SYS_CLONE, unix.CLONE_VM|unix.CLONE_FS|unix.CLONE_FILES|
			unix.CLONE_SIGHAND|unix.CLONE_THREAD|unix.CLONE_SYSVSEM|unix.CLONE_SETTLS|
			unix.CLONE_PARENT_SETTID|unix.CLONE_CHILD_CLEARTID), retAllow},

		tc{"ioctl/TIOCSTI", call(unix.SYS_IOCTL, 0, unix.TIOCSTI), retEPERM},
		tc{"ioctl/TIOCLINUX", call(unix.SYS_IOCTL, 0, unix.TIOCLINUX), retEPERM},
		tc{"ioctl/TIOCSTI with junk in high word", call(unix.SYS_IOCTL, 0, unix.TIOCSTI|1<<32), retEPERM},
		tc{"ioctl/TCGETS", call(unix.SYS_IOCTL, 0, unix.TCGETS), retAllow},
		tc{"ioctl/TIOCGWINSZ", call(unix.SYS_IOCTL, 1, unix.TIOCGWINSZ), retAllow},
		tc{"ioctl/TIOCSTI as the fd", call(unix.SYS_IOCTL, unix.TIOCSTI, unix.TCGETS), retAllow},

		tc{"socket/MPTCP", call(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, ipprotoMPTCP), retEPROTONOSUPPORT},
		tc{"socket/SCTP", call(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM, ipprotoSCTP), retEPROTONOSUPPORT},
		tc{"socket/TCP", call(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, 0), retAllow},

		tc{"mknodat/char device", call(unix.SYS_MKNODAT, atFDCWD, 0, unix.S_IFCHR|0o666, 0x103), retEPERM},
		tc{"mknodat/block device", call(unix.SYS_MKNODAT, atFDCWD, 0, unix.S_IFBLK|0o600, 0x801), retEPERM},
		tc{"mknodat/char device, junk in high word", call(unix.SYS_MKNODAT, atFDCWD, 0, unix.S_IFCHR|0o666|1<<40, 0), retEPERM},
		tc{"mknodat/fifo", call(unix.SYS_MKNODAT, atFDCWD, 0, unix.S_IFIFO|0o644, 0), retAllow},
		tc{"mknodat/socket", call(unix.SYS_MKNODAT, atFDCWD, 0, unix.S_IFSOCK|0o644, 0), retAllow},
		tc{"mknodat/regular", call(unix.SYS_MKNODAT, atFDCWD, 0, unix.S_IFREG|0o644, 0), retAllow},
		tc{"mknodat/no type (regular)", call(unix.SYS_MKNODAT, atFDCWD, 0, 0o644, 0), retAllow},
		tc{"socket/unix", call(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0), retAllow},

		tc{"x32/getpid", call(unix.SYS_GETPID | 0x40000000), retKill},
		tc{"x32/bit alone", call(0x40000000), retKill},
		tc{"x32/nr -1", call(^uintptr(0)), retKill},
		tc{"native/highest plausible number", call(0x3fffffff), retAllow},
	)
	if runtime.GOARCH == "amd64" {
		cases = append(cases,
			tc{"mknod/char device", call(unix.SYS_MKNOD, 0, unix.S_IFCHR|0o666, 0x10e5), retEPERM},
			tc{"mknod/block device", call(unix.SYS_MKNOD, 0, unix.S_IFBLK|0o666, 0), retEPERM},
			tc{"mknod/fifo", call(unix.SYS_MKNOD, 0, unix.S_IFIFO|0o600, 0), retAllow},
			tc{"mknod/char mode as the path", call(unix.SYS_MKNOD, unix.S_IFCHR, unix.S_IFIFO, 0), retAllow},
		)
	}
	for _, foreign := range []uint32{unix.AUDIT_ARCH_I386, unix.AUDIT_ARCH_X86_64, unix.AUDIT_ARCH_ARM,
		unix.AUDIT_ARCH_AARCH64, 0, 0xffffffff} {
		if foreign == arch {
			continue
		}
		// 288 is accept4 on x86-64 (allowed) and keyctl on i386; 20 is
		// getpid on i386. Only the arch guard can stop these.
		for _, nr := range []uintptr{288, 20, 0} {
			d := call(nr)
			d.arch = foreign
			cases = append(cases, tc{fmt.Sprintf("foreign arch %#x/nr %d", foreign, nr), d, retKill})
		}
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := mustEvaluate(t, prog, c.d); got != c.want {
				t.Errorf("nr %d arch %#x args %#x: got %#x, want %#x", c.d.nr, c.d.arch, c.d.args[:2], got, c.want)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Live tests: the filter installed in a child process.

type childResult struct {
	result string // the probe's RESULT lines, without the prefix
	status syscall.WaitStatus
	stderr string
}

func (r childResult) killedBy(sig syscall.Signal) bool {
	return r.status.Signaled() && r.status.Signal() == sig
}

func (r childResult) String() string {
	how := fmt.Sprintf("exit %d", r.status.ExitStatus())
	if r.status.Signaled() {
		how = "killed by " + r.status.Signal().String()
	}
	return fmt.Sprintf("%s, result %q, stderr %q", how, r.result, r.stderr)
}

// runChild runs probe in a fresh copy of the test binary, with the filter
// installed or, for the baseline, without.
func runChild(t *testing.T, probe string, filtered bool) childResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), probeEnv+"="+probe, noFilterEnv+"=0")
	if !filtered {
		cmd.Env = append(cmd.Env, noFilterEnv+"=1")
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("run probe %s: %v", probe, err)
	}
	var lines []string
	for line := range strings.Lines(stdout.String()) {
		if rest, ok := strings.CutPrefix(line, resultPrefix); ok {
			lines = append(lines, strings.TrimSuffix(rest, "\n"))
		}
	}
	return childResult{
		result: strings.Join(lines, "\n"),
		status: cmd.ProcessState.Sys().(syscall.WaitStatus),
		stderr: stderr.String(),
	}
}

func TestFilterDeniesSyscalls(t *testing.T) {
	nativeAuditArch(t)
	parse := func(r childResult) map[string]string {
		if r.status.ExitStatus() != 0 {
			t.Fatalf("denied probe: %v", r)
		}
		m := map[string]string{}
		for line := range strings.Lines(r.result) {
			name, errno, _ := strings.Cut(strings.TrimSpace(line), " ")
			m[name] = errno
		}
		return m
	}
	filtered := parse(runChild(t, "denied", true))
	baseline := parse(runChild(t, "denied", false))
	var inconclusive []string
	for _, name := range Denied() {
		t.Run(name, func(t *testing.T) {
			want := "EPERM"
			if name == "clone3" {
				want = "ENOSYS"
			}
			if got := filtered[name]; got != want {
				t.Errorf("with the filter %s gives %q, want %s (without: %q)", name, got, want, baseline[name])
			}
			if baseline[name] == want {
				// The kernel refuses this caller anyway; the decision
				// itself is covered by TestProgramDecisions.
				inconclusive = append(inconclusive, name)
			}
		})
	}
	if len(inconclusive) > 0 {
		t.Logf("refused with the same errno even without the filter (unprivileged?): %v", inconclusive)
	}
	t.Logf("without the filter: %v", baseline)
}

func TestFilterProbes(t *testing.T) {
	nativeAuditArch(t)
	tests := []struct {
		probe string
		want  string
		// baselineDiffers: without the filter the probe gives a known,
		// different answer, so this row can fail.
		baselineDiffers bool
	}{
		{"clone3", "ENOSYS", true},
		{"clone-newuser", "EPERM", false}, // baseline depends on userns policy
		{"unshare-newuser", "EPERM", true},
		{"ioctl-tiocsti", "EPERM", true},
		{"ioctl-tiocsti-highbits", "EPERM", true},
		{"ioctl-tioclinux", "EPERM", true},
		{"socket-mptcp", "EPROTONOSUPPORT", false}, // baseline depends on net.mptcp.enabled
		{"ioctl-tcgets-pipe", "ENOTTY", false},
		{"clone-fork", "ok", false},
		{"getpid", "ok", false},
		{"read-write-file", "ok", false},
		{"mknod-devices", "char=EPERM block=EPERM fifo=ok", os.Geteuid() == 0}, // root makes devices without the filter
		{"exec-true", "ok", false},
		{"exec-sh", "ok", false},
		{"exec-bash", "ok", false},
		{"exec-python3", "ok", false},
		{"exec-node", "ok", false},
		{"exec-go", "seccomp=2 unshare=EPERM clone3=ENOSYS exec=ok", true},
		{"tsync-other-thread", "EPERM", true},
		{"tsync-all-threads", "ok", true},
		{"tsync-blocked", "ok", false},
	}
	for _, tc := range tests {
		t.Run(tc.probe, func(t *testing.T) {
			t.Parallel()
			got := runChild(t, tc.probe, true)
			if reason, ok := strings.CutPrefix(got.result, "skip: "); ok {
				t.Skip(reason)
			}
			if got.status.ExitStatus() != 0 || got.result != tc.want {
				t.Fatalf("with the filter: %v; want result %q", got, tc.want)
			}
			if !tc.baselineDiffers {
				return
			}
			base := runChild(t, tc.probe, false)
			if base.result == tc.want {
				t.Fatalf("without the filter the probe also gives %q (%v): it cannot detect a broken filter", tc.want, base)
			}
			t.Logf("without the filter %s gives %q", tc.probe, base.result)
		})
	}
}

func TestFilterKillsForeignABI(t *testing.T) {
	nativeAuditArch(t)
	for _, tc := range []struct {
		probe string
		skip  bool
	}{
		{"int80-keyctl", probe.Refused() != ""},
		{"nr-x32-bit", false},
	} {
		t.Run(tc.probe, func(t *testing.T) {
			t.Parallel()
			if tc.skip {
				t.Skipf("%s: %s", tc.probe, probe.Refused())
			}
			base := runChild(t, tc.probe, false)
			if base.killedBy(syscall.SIGSYS) {
				t.Fatalf("without the filter the probe already dies of SIGSYS (%v): it proves nothing", base)
			}
			t.Logf("without the filter %s: %v", tc.probe, base)
			got := runChild(t, tc.probe, true)
			if got.killedBy(syscall.SIGSYS) {
				return
			}
			if base.killedBy(syscall.SIGSEGV) && got.killedBy(syscall.SIGSEGV) {
				t.Skipf("int $0x80 faults before seccomp sees it (kernel without IA32 emulation): %v", got)
			}
			t.Fatalf("with the filter: %v; want killed by SIGSYS", got)
		})
	}
}

// ---------------------------------------------------------------------------
// The child side.

type probeSpec struct {
	run func() string
	// selfInstall: the probe calls installForProbe itself, because it has
	// to prepare threads first.
	selfInstall bool
}

func childProbes() map[string]probeSpec {
	plain := func(f func() string) probeSpec { return probeSpec{run: f} }
	return map[string]probeSpec{
		"denied": plain(probeDenied),
		"clone3": plain(func() string {
			// NULL args of size 0: EINVAL from the kernel, if it runs.
			_, _, e := unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0)
			return errName(e)
		}),
		"clone-newuser": plain(func() string { return forkAndReap(unix.CLONE_NEWUSER | uintptr(unix.SIGCHLD)) }),
		"clone-fork":    plain(func() string { return forkAndReap(uintptr(unix.SIGCHLD)) }),
		"unshare-newuser": plain(func() string {
			// Without the filter: EINVAL, since a Go process is
			// multi-threaded.
			return errName(unix.Unshare(unix.CLONE_NEWUSER))
		}),
		"ioctl-tiocsti":          plain(func() string { return ioctlStdin(unix.TIOCSTI) }),
		"ioctl-tiocsti-highbits": plain(func() string { return ioctlStdin(unix.TIOCSTI | 1<<32) }),
		"ioctl-tioclinux":        plain(func() string { return ioctlStdin(unix.TIOCLINUX) }),
		"socket-mptcp": plain(func() string {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, ipprotoMPTCP)
			if err == nil {
				unix.Close(fd)
			}
			return errName(err)
		}),
		"ioctl-tcgets-pipe": plain(func() string {
			var p [2]int
			if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
				return "pipe: " + err.Error()
			}
			var tio unix.Termios
			_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(p[0]), unix.TCGETS, uintptr(unsafe.Pointer(&tio)))
			return errName(e)
		}),
		"getpid": plain(func() string {
			if pid := unix.Getpid(); pid <= 0 || pid != os.Getpid() {
				return fmt.Sprintf("getpid %d, os.Getpid %d", pid, os.Getpid())
			}
			return "ok"
		}),
		"read-write-file": plain(probeFiles),
		"mknod-devices": plain(func() string {
			dir, err := os.MkdirTemp("", "seccomp-mknod-")
			if err != nil {
				return err.Error()
			}
			defer os.RemoveAll(dir)
			try := func(name string, mode uint32, dev int) string {
				return name + "=" + errName(unix.Mknod(filepath.Join(dir, name), mode, dev))
			}
			return strings.Join([]string{try("char", unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))),
				try("block", unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))), try("fifo", unix.S_IFIFO|0o600, 0)}, " ")
		}),
		"exec-true": plain(func() string { return runCommand("/bin/true") }),
		"exec-sh": plain(func() string {
			return runCommand("/bin/sh", "-c", `x=$(echo hi | cat) && [ "$x" = hi ] && /bin/true`)
		}),
		"exec-bash": plain(func() string {
			return runCommand("bash", "-c", `x=$( (echo hi) | cat ) && [[ $x == hi ]] && { sleep 0.01 & wait $!; }`)
		}),
		"exec-python3": plain(func() string {
			return runCommand("python3", "-c", `
import os, subprocess, threading
t = threading.Thread(target=lambda: None); t.start(); t.join()
subprocess.run(["/bin/true"], check=True)
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
open("/proc/self/status").read()
`)
		}),
		"exec-node": plain(func() string {
			return runCommand("node", "-e", `
const cp = require("child_process"), fs = require("fs");
cp.execFileSync("/bin/true");
fs.readFileSync("/proc/self/status");
fs.promises.readFile("/proc/self/status").then(() => new Promise((ok, bad) =>
  cp.execFile("/bin/sh", ["-c", "true"], e => e ? bad(e) : ok())))
  .catch(e => { console.error(e); process.exit(1); });
`)
		}),
		"exec-go":            plain(probeExecGo),
		"inherited":          plain(probeInherited),
		"tsync-other-thread": {run: probeOtherThread, selfInstall: true},
		"tsync-all-threads":  {run: probeAllThreads, selfInstall: true},
		"tsync-blocked":      {run: probeTSYNCBlocked, selfInstall: true},
		"int80-keyctl": plain(func() string {
			// i386 keyctl(0, 0, 0, 0, 0); 288 is accept4 on x86-64,
			// which the filter allows, so only the arch guard stops it.
			r := probe.Int80(288)
			return fmt.Sprintf("int $0x80 returned %d", int32(r))
		}),
		"nr-x32-bit": plain(func() string {
			_, _, e := unix.RawSyscall(unix.SYS_GETPID|0x40000000, 0, 0, 0)
			return "returned " + errName(e)
		}),
	}
}

func runProbe(name string) int {
	p, ok := childProbes()[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown probe %q\n", name)
		return 2
	}
	// Probes that are meant to be killed must not leave core files behind.
	_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	runtime.LockOSThread()
	if !p.selfInstall {
		if err := installForProbe(); err != nil {
			fmt.Println(resultPrefix + "install: " + err.Error())
			return 3
		}
	}
	for line := range strings.Lines(p.run()) {
		fmt.Println(resultPrefix + strings.TrimSuffix(line, "\n"))
	}
	return 0
}

// installForProbe does what the agent does: no_new_privs, then Install.
func installForProbe() error {
	if os.Getenv(noFilterEnv) == "1" {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	return Install()
}

func errName(err error) string {
	var e unix.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &e) && e == 0:
		return "ok"
	case errors.As(err, &e) && unix.ErrnoName(e) != "":
		return unix.ErrnoName(e)
	}
	return err.Error()
}

// probeDenied calls every denied system call and prints "name errno". The
// baseline child runs these calls for real (as root, too), so each argument
// set is chosen to be rejected by the kernel, or to do nothing, should the
// filter let it through: NULL pointers, bad file descriptors, invalid flags.
func probeDenied() string {
	const badFD = ^uintptr(0)
	path, _ := unix.BytePtrFromString("/nonexistent/ironclaw-seccomp-test")
	args := map[string][6]uintptr{
		"acct":              {uintptr(unsafe.Pointer(path))}, // NULL would switch accounting off
		"ptrace":            {unix.PTRACE_PEEKDATA},          // pid 0: ESRCH; TRACEME (0) would attach us
		"syslog":            {10},                            // SYSLOG_ACTION_SIZE_BUFFER, read-only
		"kexec_load":        {0, 1, 0, 0xffff0000},           // foreign kexec arch, one NULL segment; 0 segments means unload
		"kexec_file_load":   {badFD, badFD, 0, 0, 0},
		"setns":             {badFD},
		"finit_module":      {badFD},
		"pidfd_getfd":       {badFD},
		"quotactl_fd":       {badFD},
		"io_uring_enter":    {badFD},
		"io_uring_register": {badFD},
		"fsconfig":          {badFD},
		"fsmount":           {badFD},
		"open_by_handle_at": {badFD},
		"name_to_handle_at": {badFD},
	}
	nrs := map[string]uint32{}
	spec, err := currentArch()
	if err != nil {
		return err.Error()
	}
	for _, r := range rules(spec) {
		nrs[r.name] = r.nr
	}
	var out strings.Builder
	for _, name := range Denied() {
		a := args[name] // zeros unless listed
		_, _, e := unix.Syscall6(uintptr(nrs[name]), a[0], a[1], a[2], a[3], a[4], a[5])
		fmt.Fprintf(&out, "%s %s\n", name, errName(e))
	}
	runtime.KeepAlive(path)
	return out.String()
}

func ioctlStdin(req uintptr) string {
	c := byte('x')
	_, _, e := unix.Syscall(unix.SYS_IOCTL, 0, req, uintptr(unsafe.Pointer(&c)))
	return errName(e)
}

// rawClone calls clone(2) with flags only, like fork. The child is a
// single-threaded copy of a multi-threaded Go process, where nothing but raw
// system calls is safe, so it exits at once.
//
//go:noinline
func rawClone(flags uintptr) (int, unix.Errno) {
	r, _, e := unix.RawSyscall6(unix.SYS_CLONE, flags, 0, 0, 0, 0, 0)
	if e == 0 && r == 0 {
		unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	return int(r), e
}

func forkAndReap(flags uintptr) string {
	pid, e := rawClone(flags)
	if e != 0 {
		return errName(e)
	}
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "wait4: " + err.Error()
		}
		break
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return fmt.Sprintf("child status %#x", uint32(ws))
	}
	return "ok"
}

func probeFiles() string {
	f, err := os.CreateTemp("", "seccomp-probe-*")
	if err != nil {
		return err.Error()
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString("hello"); err != nil {
		return err.Error()
	}
	if err := f.Close(); err != nil {
		return err.Error()
	}
	if b, err := os.ReadFile(f.Name()); err != nil || string(b) != "hello" {
		return fmt.Sprintf("read back %q, %v", b, err)
	}
	if b, err := os.ReadFile("/proc/self/status"); err != nil || !bytes.Contains(b, []byte("Seccomp:")) {
		return fmt.Sprintf("/proc/self/status: %v", err)
	}
	return "ok"
}

// runCommand runs a program through os/exec (Go's vfork+pidfd path).
func runCommand(name string, args ...string) string {
	path, err := exec.LookPath(name)
	if err != nil {
		return "skip: " + name + " not installed"
	}
	out, err := exec.Command(path, args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s: %v: %q", name, err, out)
	}
	return "ok"
}

// probeExecGo starts another Go program under the inherited filter: the
// test binary again, running probeInherited without installing anything.
func probeExecGo() string {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), probeEnv+"=inherited", noFilterEnv+"=1")
	out, err := cmd.Output()
	if err != nil {
		return fmt.Sprintf("go child: %v: %q", err, out)
	}
	for line := range strings.Lines(string(out)) {
		if rest, ok := strings.CutPrefix(line, resultPrefix); ok {
			return strings.TrimSpace(rest)
		}
	}
	return fmt.Sprintf("go child printed no result: %q", out)
}

func probeInherited() string {
	// Make the runtime create threads under the filter.
	done := make(chan int)
	for range 4 {
		go func() {
			runtime.LockOSThread()
			done <- unix.Gettid()
		}()
	}
	for range 4 {
		<-done
	}
	mode, _ := statusField("/proc/self/status", "Seccomp")
	return fmt.Sprintf("seccomp=%s unshare=%s clone3=%s exec=%s",
		mode,
		errName(unix.Unshare(unix.CLONE_NEWUSER)),
		func() string { _, _, e := unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0); return errName(e) }(),
		runCommand("/bin/true"))
}

// lockedThread runs f on a goroutine locked to its own OS thread and keeps
// that thread alive; it returns the thread's id.
func lockedThread(f func()) int {
	tid := make(chan int)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		tid <- unix.Gettid()
		f()
	}()
	return <-tid
}

// probeOtherThread: a thread that existed before Install, and did not call
// it, must be filtered too (TSYNC).
func probeOtherThread() string {
	start, result := make(chan struct{}), make(chan string)
	other := lockedThread(func() {
		<-start
		result <- errName(unix.Unshare(unix.CLONE_NEWUSER))
	})
	if other == unix.Gettid() {
		return "helper goroutine is on the installing thread"
	}
	if err := installForProbe(); err != nil {
		return "install: " + err.Error()
	}
	close(start)
	return <-result
}

// probeAllThreads: after Install every thread reports filter mode and
// no_new_privs, including ones that did not set no_new_privs themselves.
func probeAllThreads() string {
	lockedThread(func() { select {} })
	if err := installForProbe(); err != nil {
		return "install: " + err.Error()
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err.Error()
	}
	if len(tasks) < 2 {
		return fmt.Sprintf("only %d threads", len(tasks))
	}
	var bad []string
	for _, task := range tasks {
		status := filepath.Join("/proc/self/task", task.Name(), "status")
		mode, err1 := statusField(status, "Seccomp")
		nnp, err2 := statusField(status, "NoNewPrivs")
		if errors.Is(err1, os.ErrNotExist) || errors.Is(err2, os.ErrNotExist) {
			continue // the thread exited meanwhile
		}
		if mode != "2" || nnp != "1" {
			bad = append(bad, fmt.Sprintf("tid %s: Seccomp=%q NoNewPrivs=%q", task.Name(), mode, nnp))
		}
	}
	if len(bad) > 0 {
		return strings.Join(bad, "; ")
	}
	return "ok"
}

// probeTSYNCBlocked: a thread under a filter of its own cannot be
// synchronised; Install must fail, name that thread and install nothing.
func probeTSYNCBlocked() string {
	if os.Getenv(noFilterEnv) == "1" {
		return "skip: needs the filter"
	}
	installed := make(chan error)
	blocker := lockedThread(func() {
		allow := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW}}
		fprog := unix.SockFprog{Len: 1, Filter: &allow[0]}
		err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
		if err == nil {
			_, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
			if e != 0 {
				err = e
			}
		}
		installed <- err
		select {}
	})
	if err := <-installed; err != nil {
		return "blocker filter: " + err.Error()
	}
	err := installForProbe()
	var tse *ThreadSyncError
	if !errors.As(err, &tse) {
		return fmt.Sprintf("Install() = %v, want a ThreadSyncError", err)
	}
	if tse.TID != blocker || !strings.Contains(err.Error(), strconv.Itoa(blocker)) {
		return fmt.Sprintf("Install() = %q naming %d, want thread %d", err, tse.TID, blocker)
	}
	if mode, err := statusField("/proc/thread-self/status", "Seccomp"); mode != "0" {
		return fmt.Sprintf("installing thread has Seccomp=%q (%v) after the failure", mode, err)
	}
	return "ok"
}

func statusField(path, field string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("%s: no %s", path, field)
}
