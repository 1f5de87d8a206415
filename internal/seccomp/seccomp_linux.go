package seccomp

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Layout of struct seccomp_data, the input of the filter.
const (
	offNr   = 0
	offArch = 4
	// args[i] is 64 bits wide at offArgs+8*i. Both supported architectures
	// are little-endian, so the low word, the only one the filter compares,
	// comes first.
	offArgs         = 16
	seccompDataSize = 64
)

// x32SyscallBit marks the x32 ABI on x86-64 (__X32_SYSCALL_BIT). x32 calls
// report AUDIT_ARCH_X86_64, so the arch check alone does not stop them. No
// architecture has system-call numbers this high, so the check is applied
// everywhere. It also catches nr -1, which only a tracer rewriting a call
// to skip it would produce; inside the sandbox there are no tracers.
const x32SyscallBit = 0x40000000

// Filter return values.
const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retKill   = unix.SECCOMP_RET_KILL_PROCESS
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	// retEPROTONOSUPPORT is what a kernel without the protocol says, so
	// programs that try MPTCP first (Go's net does) fall back to TCP.
	retEPROTONOSUPPORT = unix.SECCOMP_RET_ERRNO | uint32(unix.EPROTONOSUPPORT)
)

// Transport protocols that landlock's TCP port rules do not cover.
const (
	ipprotoSCTP  = 132
	ipprotoMPTCP = 262
)

// namespaceFlags are the clone flags that create a namespace. CLONE_NEWTIME
// (0x80) overlaps the exit-signal byte of clone(2); a valid exit signal is at
// most 64, so the bit is never set by a legitimate call and testing it costs
// nothing.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWTIME

// sysname pairs a system call with its number on the running architecture.
type sysname struct {
	name string
	nr   uint32
}

// archSpec is what differs between architectures; see arch_linux_*.go.
type archSpec struct {
	auditArch uint32
	// cloneFlagsArg is the argument of clone(2) that holds the flags. It is
	// 0 on amd64 and arm64 (s390x, for one, swaps the first two).
	cloneFlagsArg int
	// denied are the EPERM calls that only exist on this architecture.
	denied []sysname
	// restricted are the argument rules that only exist on this
	// architecture.
	restricted []rule
}

// commonDenied are refused with EPERM wherever they exist; every one of them
// exists on both amd64 and arm64.
func commonDenied() []sysname {
	return []sysname{
		// Mounts and namespaces.
		{"mount", unix.SYS_MOUNT},
		{"umount2", unix.SYS_UMOUNT2},
		{"move_mount", unix.SYS_MOVE_MOUNT},
		{"open_tree", unix.SYS_OPEN_TREE},
		{"open_tree_attr", unix.SYS_OPEN_TREE_ATTR},
		{"fsopen", unix.SYS_FSOPEN},
		{"fsconfig", unix.SYS_FSCONFIG},
		{"fsmount", unix.SYS_FSMOUNT},
		{"fspick", unix.SYS_FSPICK},
		{"mount_setattr", unix.SYS_MOUNT_SETATTR},
		{"pivot_root", unix.SYS_PIVOT_ROOT},
		{"chroot", unix.SYS_CHROOT},
		{"unshare", unix.SYS_UNSHARE},
		{"setns", unix.SYS_SETNS},
		// Reaching into other processes.
		{"ptrace", unix.SYS_PTRACE},
		{"process_vm_readv", unix.SYS_PROCESS_VM_READV},
		{"process_vm_writev", unix.SYS_PROCESS_VM_WRITEV},
		{"pidfd_getfd", unix.SYS_PIDFD_GETFD},
		// Kernel attack surface.
		{"bpf", unix.SYS_BPF},
		{"perf_event_open", unix.SYS_PERF_EVENT_OPEN},
		{"add_key", unix.SYS_ADD_KEY},
		{"request_key", unix.SYS_REQUEST_KEY},
		{"keyctl", unix.SYS_KEYCTL},
		{"userfaultfd", unix.SYS_USERFAULTFD},
		{"io_uring_setup", unix.SYS_IO_URING_SETUP},
		{"io_uring_enter", unix.SYS_IO_URING_ENTER},
		{"io_uring_register", unix.SYS_IO_URING_REGISTER},
		{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT},
		{"name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT},
		{"fanotify_init", unix.SYS_FANOTIFY_INIT},
		{"lookup_dcookie", unix.SYS_LOOKUP_DCOOKIE},
		// Host administration.
		{"kexec_load", unix.SYS_KEXEC_LOAD},
		{"kexec_file_load", unix.SYS_KEXEC_FILE_LOAD},
		{"init_module", unix.SYS_INIT_MODULE},
		{"finit_module", unix.SYS_FINIT_MODULE},
		{"delete_module", unix.SYS_DELETE_MODULE},
		{"reboot", unix.SYS_REBOOT},
		{"swapon", unix.SYS_SWAPON},
		{"swapoff", unix.SYS_SWAPOFF},
		{"settimeofday", unix.SYS_SETTIMEOFDAY},
		{"clock_settime", unix.SYS_CLOCK_SETTIME},
		{"clock_adjtime", unix.SYS_CLOCK_ADJTIME},
		{"adjtimex", unix.SYS_ADJTIMEX},
		{"acct", unix.SYS_ACCT},
		{"quotactl", unix.SYS_QUOTACTL},
		{"quotactl_fd", unix.SYS_QUOTACTL_FD},
		{"syslog", unix.SYS_SYSLOG},
		{"nfsservctl", unix.SYS_NFSSERVCTL},
	}
}

// argMatch narrows a rule to calls whose argument matches. Only the low 32
// bits are compared: the flags of clone and the request of ioctl are 32-bit
// values to the kernel, which ignores the high word, so comparing all 64 bits
// would let a caller slip past by setting junk there.
type argMatch struct {
	arg    int      // argument index
	anyBit uint32   // matches if arg&anyBit != 0 (unless 0)
	mask   uint32   // if not 0, equals compares arg&mask
	equals []uint32 // matches if arg (masked) equals one of these
	desc   string   // for Restricted
}

// deviceNode matches a mknod mode argument that makes a character or block
// device. A user namespace (native, runc) or a missing CAP_MKNOD (Docker)
// refuses these anyway; gVisor does not, and its mounts ignore nodev, so a
// sandbox there could make itself /dev/fuse or /dev/net/tun.
func deviceNode(arg int) *argMatch {
	return &argMatch{arg: arg, mask: unix.S_IFMT, equals: []uint32{unix.S_IFCHR, unix.S_IFBLK},
		desc: "mode making a character or block device: EPERM"}
}

// rule maps one system call to an action, optionally only for some
// arguments. A system call may appear in at most one rule.
type rule struct {
	sysname
	action uint32
	match  *argMatch // nil: every call
}

func rules(spec archSpec) []rule {
	// The kernel cannot cache the verdict for the calls whose arguments
	// the filter reads (ioctl is frequent): they run the filter, a path
	// of the search tree (Program). For all other calls the verdict
	// depends only on arch and number, and the kernel (5.11+) caches
	// "allow" without running the filter at all.
	rs := []rule{
		{
			sysname: sysname{"ioctl", unix.SYS_IOCTL},
			action:  retEPERM,
			match: &argMatch{
				arg:    1,
				equals: []uint32{unix.TIOCSTI, unix.TIOCLINUX},
				desc:   "request TIOCSTI or TIOCLINUX: EPERM",
			},
		},
		{
			sysname: sysname{"clone", unix.SYS_CLONE},
			action:  retEPERM,
			match: &argMatch{
				arg:    spec.cloneFlagsArg,
				anyBit: namespaceFlags,
				desc:   "flags with any CLONE_NEW* namespace flag: EPERM",
			},
		},
		{
			// Landlock's port rules mediate TCP sockets only: an MPTCP or
			// SCTP socket could reach any loopback port.
			sysname: sysname{"socket", unix.SYS_SOCKET},
			action:  retEPROTONOSUPPORT,
			match: &argMatch{
				arg:    2,
				equals: []uint32{ipprotoMPTCP, ipprotoSCTP},
				desc:   "protocol MPTCP or SCTP: EPROTONOSUPPORT",
			},
		},
		{sysname: sysname{"mknodat", unix.SYS_MKNODAT}, action: retEPERM, match: deviceNode(2)},
		{sysname: sysname{"clone3", unix.SYS_CLONE3}, action: retENOSYS},
	}
	rs = append(rs, spec.restricted...)
	for _, s := range append(commonDenied(), spec.denied...) {
		rs = append(rs, rule{sysname: s, action: retEPERM})
	}
	return rs
}

// Program returns the BPF filter for the running architecture.
//
// Layout: the arch guard, the x32 guard, then a search tree over the
// rules' system-call numbers. Its inner nodes are "JGE pivot" (with a JA
// when the lower half is too long for an 8-bit offset); its leaves hold
// up to leafRules self-contained blocks ("JEQ nr, else skip the block";
// every path through a block returns) and end in ALLOW.
//
// A tree, not one chain of blocks: when the filter is installed, the
// kernel (5.11+) runs it once per system-call number to find the calls
// it may allow without running it again, and along a chain every allowed
// number walks every block. With the 61 rules of x86-64, the chain took
// 111-121 us to install here, the tree 51 us, and a one-instruction
// filter 12-15 us (docs/performance.md); the longest path is 16
// instructions, against 66 along the chain.
func Program() ([]unix.SockFilter, error) {
	spec, err := currentArch()
	if err != nil {
		return nil, err
	}
	return build(spec.auditArch, rules(spec))
}

func build(auditArch uint32, rs []rule) ([]unix.SockFilter, error) {
	prog := []unix.SockFilter{
		load(offArch),
		jump(unix.BPF_JEQ, auditArch, 1, 0),
		ret(retKill),
		load(offNr),
		jump(unix.BPF_JGE, x32SyscallBit, 0, 1),
		ret(retKill),
	}
	seen := make(map[uint32]string, len(rs))
	for _, r := range rs {
		if prev, dup := seen[r.nr]; dup {
			return nil, fmt.Errorf("seccomp: %s and %s are both system call %d", prev, r.name, r.nr)
		}
		seen[r.nr] = r.name
	}
	sorted := slices.SortedFunc(slices.Values(rs), func(a, b rule) int { return cmp.Compare(a.nr, b.nr) })
	tree, err := emitTree(sorted)
	if err != nil {
		return nil, err
	}
	prog = append(prog, tree...)
	if err := validate(prog); err != nil {
		return nil, err
	}
	return prog, nil
}

// leafRules is the most rules a leaf of the search tree tests in turn.
const leafRules = 4

// emitTree returns the search tree over rs, sorted by number and
// distinct; A holds the system-call number on entry, and every path
// returns. Only a block that matches its number loads anything else
// into A (an argument), and it then returns, so A is the number wherever
// a jump leads.
func emitTree(rs []rule) ([]unix.SockFilter, error) {
	if len(rs) <= leafRules {
		var leaf []unix.SockFilter
		for _, r := range rs {
			block, err := r.emit()
			if err != nil {
				return nil, err
			}
			leaf = append(leaf, block...)
		}
		return append(leaf, ret(retAllow)), nil
	}
	mid := len(rs) / 2
	lower, err := emitTree(rs[:mid])
	if err != nil {
		return nil, err
	}
	upper, err := emitTree(rs[mid:])
	if err != nil {
		return nil, err
	}
	pivot := rs[mid].nr
	var node []unix.SockFilter
	if len(lower) <= 255 {
		node = []unix.SockFilter{jump(unix.BPF_JGE, pivot, uint8(len(lower)), 0)}
	} else {
		// Past 8 bits: the upper half is reached through a JA.
		node = []unix.SockFilter{jump(unix.BPF_JGE, pivot, 0, 1), {Code: unix.BPF_JMP | unix.BPF_JA, K: uint32(len(lower))}}
	}
	return slices.Concat(node, lower, upper), nil
}

// emit returns "JEQ nr, 0, len(body)" followed by body, which returns on
// every path; A holds the system-call number on entry.
func (r rule) emit() ([]unix.SockFilter, error) {
	var body []unix.SockFilter
	if m := r.match; m == nil {
		body = []unix.SockFilter{ret(r.action)}
	} else {
		if m.arg < 0 || m.arg > 5 {
			return nil, fmt.Errorf("seccomp: %s: no argument %d", r.name, m.arg)
		}
		// LD arg; tests that jump to the last RET on a match; RET ALLOW;
		// RET action.
		var tests []unix.SockFilter
		if m.anyBit != 0 {
			tests = append(tests, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, K: m.anyBit})
		}
		var masked []unix.SockFilter
		for _, v := range m.equals {
			masked = append(masked, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: v})
		}
		if m.mask != 0 {
			if m.anyBit != 0 {
				return nil, fmt.Errorf("seccomp: %s: a mask and anyBit together", r.name)
			}
			// A &= mask; the equality tests below see the masked value.
			tests = append(tests, unix.SockFilter{Code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, K: m.mask})
		}
		ntests := len(tests) + len(masked)
		tests = append(tests, masked...)
		if len(masked) == 0 && m.anyBit == 0 || ntests > 250 {
			return nil, fmt.Errorf("seccomp: %s: %d argument tests", r.name, ntests)
		}
		for i := range tests {
			if tests[i].Code&0x07 == unix.BPF_JMP {
				// From test i, skip the remaining tests and RET ALLOW.
				tests[i].Jt = uint8(len(tests) - i)
			}
		}
		body = append(body, load(uint32(offArgs+8*m.arg)))
		body = append(body, tests...)
		body = append(body, ret(retAllow), ret(r.action))
	}
	if len(body) > 255 {
		return nil, fmt.Errorf("seccomp: %s: block of %d instructions is too long to jump over", r.name, len(body))
	}
	return append([]unix.SockFilter{jump(unix.BPF_JEQ, r.nr, 0, uint8(len(body)))}, body...), nil
}

func load(off uint32) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}
}

func jump(op uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_JMP | op | unix.BPF_K, Jt: jt, Jf: jf, K: k}
}

func ret(action uint32) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: action}
}

// validate applies the structural checks the kernel would, so that a bad
// program is reported with a reason instead of a bare EINVAL.
func validate(prog []unix.SockFilter) error {
	if len(prog) == 0 || len(prog) > unix.BPF_MAXINSNS {
		return fmt.Errorf("seccomp: program has %d instructions, want 1..%d", len(prog), unix.BPF_MAXINSNS)
	}
	for i, ins := range prog {
		switch ins.Code & 0x07 { // BPF_CLASS
		case unix.BPF_JMP:
			if ins.Code&0xf0 == unix.BPF_JA { // BPF_OP
				if ins.K >= uint32(len(prog)) || i+1+int(ins.K) >= len(prog) {
					return fmt.Errorf("seccomp: instruction %d jumps past the end", i)
				}
				continue
			}
			if i+1+int(max(ins.Jt, ins.Jf)) >= len(prog) {
				return fmt.Errorf("seccomp: instruction %d jumps past the end", i)
			}
		case unix.BPF_ALU:
			if ins.Code != unix.BPF_ALU|unix.BPF_AND|unix.BPF_K {
				return fmt.Errorf("seccomp: instruction %d is an ALU operation other than AND", i)
			}
		case unix.BPF_LD:
			if ins.Code != unix.BPF_LD|unix.BPF_W|unix.BPF_ABS || ins.K%4 != 0 || ins.K >= seccompDataSize {
				return fmt.Errorf("seccomp: instruction %d is not an aligned 32-bit load from seccomp_data", i)
			}
		}
	}
	if prog[len(prog)-1].Code&0x07 != unix.BPF_RET {
		return errors.New("seccomp: program does not end with a return")
	}
	return nil
}

// Denied lists the names of the system calls the filter always refuses,
// sorted. All fail with EPERM except clone3, which fails with ENOSYS. Calls
// refused only for some arguments are listed by [Restricted].
func Denied() []string {
	return describeRules(func(r rule) (string, bool) {
		return r.name, r.match == nil && r.action != retAllow
	})
}

// Restricted describes, sorted, the system calls the filter refuses only for
// some arguments, as "name: condition: errno".
func Restricted() []string {
	return describeRules(func(r rule) (string, bool) {
		if r.match == nil {
			return "", false
		}
		return r.name + ": " + r.match.desc, true
	})
}

// describeRules returns, sorted, describe's text for each rule of this
// architecture's filter it keeps; nil where the filter has no
// architecture.
func describeRules(describe func(rule) (string, bool)) []string {
	spec, err := currentArch()
	if err != nil {
		return nil
	}
	var out []string
	for _, r := range rules(spec) {
		if text, keep := describe(r); keep {
			out = append(out, text)
		}
	}
	slices.Sort(out)
	return out
}

// ThreadSyncError reports that the kernel could not put the filter on every
// thread (SECCOMP_FILTER_FLAG_TSYNC): thread TID already has a seccomp filter
// that is not an ancestor of ours, or is in strict mode. Nothing was
// installed on any thread.
type ThreadSyncError struct {
	TID int
}

func (e *ThreadSyncError) Error() string {
	return fmt.Sprintf("thread %d cannot be synchronised to the filter (TSYNC): it runs under a different seccomp filter or mode", e.TID)
}

// Install installs [Program] on every thread of the calling process. Every
// process forked afterwards inherits it; it cannot be removed.
//
// The filter is only accepted under no_new_privs, which the caller is
// expected to have set. The flag is per thread, though, and the kernel checks
// the thread that makes the call, which in Go need not be the one where the
// caller set it. Install therefore sets no_new_privs again on its own
// (locked) thread; TSYNC then propagates it to every other thread together
// with the filter.
//
// If the kernel refuses, the error wraps the errno; if another thread blocks
// the synchronisation, it wraps a *[ThreadSyncError] naming that thread.
func Install() error {
	prog, err := Program()
	if err != nil {
		return err
	}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: set no_new_privs: %w", err)
	}

	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	tid, _, errno := unix.Syscall(unix.SYS_SECCOMP,
		unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	switch {
	case errno == unix.EACCES:
		return fmt.Errorf("seccomp: install filter: no_new_privs is not in effect and CAP_SYS_ADMIN is missing: %w", errno)
	case errno == unix.EINVAL:
		return fmt.Errorf("seccomp: install filter (%d instructions): kernel rejected it: %w", len(prog), errno)
	case errno != 0:
		return fmt.Errorf("seccomp: install filter: %w", errno)
	case tid != 0:
		return fmt.Errorf("seccomp: install filter: %w", &ThreadSyncError{TID: int(tid)})
	}
	return nil
}
