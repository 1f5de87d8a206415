package landlock

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// errataTCPOnly is bit 0 of the LANDLOCK_CREATE_RULESET_ERRATA answer:
// erratum 1 ("TCP socket identification", ABI 4) limits TCP rules to TCP
// sockets, so MPTCP, SCTP and SMC stream sockets are no longer restricted.
const errataTCPOnly = 1 << 0

// errataScopedSignal is bit 1 of the LANDLOCK_CREATE_RULESET_ERRATA answer:
// erratum 2 ("scoped signal handling", ABI 6) lets threads of one process
// signal each other even when they are in different domains.
const errataScopedSignal = 1 << 1

// ABI reports the kernel's landlock ABI version.
//
// It returns 0 and a nil error when Landlock is absent or disabled: ENOSYS
// means the kernel was built without CONFIG_SECURITY_LANDLOCK, EOPNOTSUPP
// means it was built in but not enabled at boot (it is missing from the
// lsm= list). Any other failure, such as EPERM from a seccomp filter that
// blocks the system call, is returned as an error.
func ABI() (int, error) {
	abi, errno := queryABI()
	if abi == 0 && errno != unix.ENOSYS && errno != unix.EOPNOTSUPP {
		return 0, fmt.Errorf("landlock: query ABI version: %w", errno)
	}
	return abi, nil
}

// queryABI returns the ABI version, or 0 and the errno explaining why not.
func queryABI() (int, syscall.Errno) {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0, errno
	}
	return int(v), 0
}

// queryErrata returns the bitmask of fixed errata; 0 when the kernel
// predates the query (it answers EINVAL to the unknown flag), which is the
// safe reading: nothing is known to be fixed.
func queryErrata() uint64 {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_ERRATA)
	if errno != 0 {
		return 0
	}
	return uint64(v)
}

// Restrict builds a ruleset from r, handling every access right the running
// kernel knows, and applies it to every thread of the calling process.
//
// Restrict sets no_new_privs on every thread first (Landlock requires it of
// unprivileged callers; the caller is expected to have set it anyway). When
// Landlock is unavailable it returns Status{ABI: 0, ...} and a nil error:
// the caller decides whether that is fatal. A path in r that does not exist
// is skipped and listed in Status.Missing; it is not an error.
//
// Before ABI 8 every thread gets its own Landlock domain, which matters for
// scopes: see the Status.Missing entry that Restrict adds in that case.
//
// An error means no thread was restricted; no_new_privs may have been set.
func Restrict(r Rules) (Status, error) {
	abi, errno := queryABI()
	switch {
	case errno == unix.ENOSYS:
		return Status{Missing: []string{"landlock is not built into this kernel (ENOSYS)"}}, nil
	case errno == unix.EOPNOTSUPP:
		return Status{Missing: []string{"landlock is disabled at boot (EOPNOTSUPP): add it to the lsm= kernel parameter"}}, nil
	case errno != 0:
		return Status{}, fmt.Errorf("landlock: query ABI version: %w", errno)
	}
	return restrict(r, abi)
}

// Ruleset is the ruleset Restrict makes of Rules for one kernel ABI,
// written out: for a process that restricts itself without this package
// (a sandbox's pid 1 in C, see inside/steward), which then makes the same
// calls with the same values. Paths are opened, and a missing one skipped,
// when the rules are added; each gets Dir on a directory, File on
// anything else (a zero grant adds no rule).
type Ruleset struct {
	HandledFS, HandledNet, Scoped uint64
	// AttrSize is how much of struct landlock_ruleset_attr to pass.
	AttrSize int
	Paths    []PathRule
	Ports    []PortRule
	// ExecFile is the grant of each of Rules.ExecFiles.
	ExecFile uint64
}

// PathRule grants Dir beneath a directory at Path, or File on the file.
type PathRule struct {
	Path      string
	Dir, File uint64
}

// PortRule allows Access (connect or bind) on one TCP port.
type PortRule struct {
	Port   uint16
	Access uint64
}

// Prepare returns the ruleset Restrict would make of r on a kernel that
// reports abi (0: none, an empty Ruleset), and what that kernel cannot
// enforce of it.
func Prepare(r Rules, abi int) (Ruleset, Status, error) {
	if err := validate(r); err != nil {
		return Ruleset{}, Status{}, err
	}
	if abi <= 0 {
		return Ruleset{}, Status{Missing: []string{"landlock is not available on this kernel"}}, nil
	}
	known := min(abi, maxKnownABI)

	st := Status{ABI: abi, Missing: limitations(abi, r)}
	rs := Ruleset{HandledFS: fsRights(known), HandledNet: netRights(known), AttrSize: int(rulesetAttrSize(known))}
	rs.Scoped = requestedScopes(r) & scopeRights(known)
	errata := queryErrata()
	if rs.Scoped&unix.LANDLOCK_SCOPE_SIGNAL != 0 && known < 8 && errata&errataScopedSignal == 0 {
		// Without erratum 2, a thread that restricted itself with a signal
		// scope may not signal its still-unrestricted sibling threads, and
		// the Go runtime signals each thread to run the per-thread
		// restriction: it would wait forever.
		rs.Scoped &^= unix.LANDLOCK_SCOPE_SIGNAL
		st.Missing = append(st.Missing, "signal scoping skipped: this kernel lacks landlock erratum 2 (signals between threads of one process), which per-thread restriction needs")
	}
	if rs.Scoped != 0 && known < 8 {
		// Measured on ABI 7: a child forked from thread A gets EPERM when
		// thread B signals it, because A and B hold sibling domains, each
		// outside the other's scope.
		st.Missing = append(st.Missing, "scopes are per thread before landlock ABI 8 (kernel 7.0): a process forked from one thread of this process cannot be signalled, nor its abstract unix sockets reached, from another thread or from processes forked by another thread")
	}
	if rs.HandledNet != 0 && errata&errataTCPOnly != 0 {
		st.Missing = append(st.Missing, "tcp port rules cover TCP sockets only: MPTCP (Go's net.Listen default), SCTP and SMC stream sockets can bind and connect to any port; block them with seccomp or net.mptcp.enabled=0")
	}
	for _, g := range []struct {
		paths []string
		want  uint64
	}{{r.ReadExec, grantReadExec}, {r.ReadWrite, grantReadWrite}, {r.Devices, grantDevice}} {
		for _, p := range g.paths {
			rs.Paths = append(rs.Paths, PathRule{Path: p, Dir: pathGrant(g.want, rs.HandledFS, true), File: pathGrant(g.want, rs.HandledFS, false)})
		}
	}
	rs.ExecFile = pathGrant(grantReadExec, rs.HandledFS, false)
	if rs.HandledNet != 0 {
		for _, p := range r.ConnectTCP {
			rs.Ports = append(rs.Ports, PortRule{Port: p, Access: unix.LANDLOCK_ACCESS_NET_CONNECT_TCP})
		}
		for _, p := range r.BindTCP {
			rs.Ports = append(rs.Ports, PortRule{Port: p, Access: unix.LANDLOCK_ACCESS_NET_BIND_TCP})
		}
	}
	st.Filesystem = rs.HandledFS != 0
	st.Network = rs.HandledNet != 0
	st.Scopes = rs.Scoped != 0
	return rs, st, nil
}

// restrict does the work of Restrict for a kernel that reports abi. Tests
// pass a lower abi than the kernel's to exercise what an older kernel would
// be sent; the kernel accepts that, as every ABI is a superset of the last.
func restrict(r Rules, abi int) (Status, error) {
	rs, st, err := Prepare(r, abi)
	if err != nil {
		return Status{}, err
	}
	known := min(abi, maxKnownABI)
	attr := unix.LandlockRulesetAttr{
		Handled_access_fs:  rs.HandledFS,
		Handled_access_net: rs.HandledNet,
		Scoped:             rs.Scoped,
	}
	fd, err := createRuleset(&attr, uintptr(rs.AttrSize))
	if err != nil {
		return Status{}, fmt.Errorf("landlock: create ruleset (ABI %d): %w", abi, err)
	}
	defer unix.Close(fd)

	for i, pr := range rs.Paths {
		added, err := addPathRule(fd, pr)
		if err != nil {
			return Status{}, fmt.Errorf("landlock: %s rule for %q: %w", ruleGroup(r, i), pr.Path, err)
		}
		if !added {
			st.Missing = append(st.Missing, fmt.Sprintf("%s path %q does not exist: rule skipped", ruleGroup(r, i), pr.Path))
		}
	}
	for _, f := range r.ExecFiles {
		if err := addFDRule(fd, f, PathRule{File: rs.ExecFile}); err != nil {
			return Status{}, fmt.Errorf("landlock: read-exec rule for descriptor %d: %w", f, err)
		}
	}
	for _, p := range rs.Ports {
		if err := addPortRule(fd, p.Port, p.Access); err != nil {
			name := "bind"
			if p.Access == unix.LANDLOCK_ACCESS_NET_CONNECT_TCP {
				name = "connect"
			}
			return Status{}, fmt.Errorf("landlock: tcp %s rule for port %d: %w", name, p.Port, err)
		}
	}

	// Set on every thread only now, when nothing can fail any more but the
	// restriction itself. It doubles as the cgo check, so a cgo build fails
	// before any thread is confined.
	if err := setNoNewPrivsAllThreads(); err != nil {
		return Status{}, err
	}
	if err := restrictAllThreads(fd, known); err != nil {
		return Status{}, err
	}
	return st, nil
}

// ruleGroup names the group of Rules that Prepare's i-th path rule came
// from, for messages.
func ruleGroup(r Rules, i int) string {
	switch {
	case i < len(r.ReadExec):
		return "read-exec"
	case i < len(r.ReadExec)+len(r.ReadWrite):
		return "read-write"
	}
	return "device"
}

// validate rejects rules that cannot mean anything sensible.
func validate(r Rules) error {
	for _, list := range [][]string{r.ReadExec, r.ReadWrite, r.Devices} {
		for _, p := range list {
			if p == "" {
				return errors.New("landlock: empty path in rules")
			}
		}
	}
	return nil
}

// setNoNewPrivsAllThreads sets no_new_privs on every thread; prctl only
// affects the calling thread, and a thread without it would make
// landlock_restrict_self fail there, which the Go runtime treats as fatal
// inside AllThreadsSyscall.
func setNoNewPrivsAllThreads() error {
	return allThreadsSyscall("set no_new_privs on all threads", unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0)
}

// allThreadsSyscall runs a system call on every thread of the process;
// what names it in the error. The runtime refuses (ENOTSUP) in a binary
// linked with cgo, reported as ErrCgo.
func allThreadsSyscall(what string, trap, a1, a2, a3 uintptr) error {
	_, _, errno := syscall.AllThreadsSyscall(trap, a1, a2, a3)
	switch errno {
	case 0:
		return nil
	case syscall.ENOTSUP:
		return fmt.Errorf("%w: %w", ErrCgo, errno)
	default:
		return fmt.Errorf("landlock: %s: %w", what, errno)
	}
}

// restrictAllThreads enforces the ruleset on every thread of the process.
func restrictAllThreads(fd int, abi int) error {
	if abi >= 8 {
		// One domain shared by all threads, so scopes treat the whole
		// process (and everything it forks, from any thread) as one.
		_, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), unix.LANDLOCK_RESTRICT_SELF_TSYNC, 0)
		if errno != 0 {
			return fmt.Errorf("landlock: restrict all threads (TSYNC): %w", errno)
		}
		return nil
	}
	// Before ABI 8 restrict_self only confines the calling thread, so the
	// runtime runs it on each thread. The first call's failure is reported
	// here; a later thread failing differently is fatal in the runtime,
	// which is why no_new_privs was set on every thread beforehand.
	return allThreadsSyscall("restrict all threads", unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), 0, 0)
}

func createRuleset(attr *unix.LandlockRulesetAttr, size uintptr) (int, error) {
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(attr)), size, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// addPathRule adds pr for the file or directory at its path. It reports
// false, without error, when the path does not exist.
func addPathRule(rulesetFD int, pr PathRule) (bool, error) {
	fd, err := unix.Open(pr.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open: %w", err)
	}
	defer unix.Close(fd)
	return true, addFDRule(rulesetFD, fd, pr)
}

// addFDRule adds pr for the file or directory open at fd.
func addFDRule(rulesetFD, fd int, pr PathRule) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	grant := pr.File
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		grant = pr.Dir
	}
	if grant == 0 {
		// The kernel rejects an empty grant (ENOMSG); nothing to allow here.
		return nil
	}
	// struct landlock_path_beneath_attr is packed (12 bytes); the Go type
	// has trailing padding, and the kernel only reads the first 12 bytes.
	attr := unix.LandlockPathBeneathAttr{Allowed_access: grant, Parent_fd: int32(fd)}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rulesetFD), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if errno != 0 {
		return fmt.Errorf("add rule (access %#x): %w", grant, errno)
	}
	return nil
}

func addPortRule(rulesetFD int, port uint16, access uint64) error {
	attr := netPortAttr{allowedAccess: access, port: uint64(port)}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rulesetFD), ruleNetPort, uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
