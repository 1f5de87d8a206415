// Package landlock confines the calling process with the Landlock LSM.
//
// Contract:
//
//   - Restrict is one-way: once it returns a nil error with Status.ABI > 0,
//     every thread of the process, and every process it later forks or
//     executes, is bound by the ruleset for the rest of its life. Nothing in
//     this package can undo it, so tests must only ever call it in a child
//     process.
//   - Landlock is deny-by-default for every access right the ruleset
//     "handles". Restrict handles every right the running kernel knows (up to
//     the newest ABI this package knows, see maxKnownABI) and then grants back
//     only what Rules lists. Grants are additive: ReadExec on "/" plus
//     ReadWrite on "/tmp" makes /tmp writable and the rest read-only.
//   - Restrict degrades with the kernel instead of failing: access rights the
//     kernel does not know are dropped and reported in Status.Missing, so the
//     caller can decide whether the resulting sandbox is good enough. When
//     Landlock is absent or disabled, Restrict returns Status{ABI: 0} and a
//     nil error.
//   - Landlock needs no_new_privs for unprivileged callers. Restrict sets it on
//     every thread itself, because prctl(PR_SET_NO_NEW_PRIVS) only affects the
//     calling thread and a Go program cannot control which thread that is.
//   - The restriction covers all threads: on ABI >= 8 through
//     LANDLOCK_RESTRICT_SELF_TSYNC (one domain for the whole process), on
//     older kernels by running landlock_restrict_self on each thread via
//     syscall.AllThreadsSyscall (one sibling domain per thread). That needs
//     a binary built with CGO_ENABLED=0; otherwise Restrict fails with an
//     error wrapping ErrCgo before confining anything.
//
// Things callers must know:
//
//   - os/exec opens /dev/null for writing to connect a child's unused
//     stdio, so list "/dev/null" in Devices (or make it writable otherwise).
//   - With scopes before ABI 8, a process forked from one thread can only be
//     signalled from that thread (or from inside its own domain): fork and
//     signal children from one goroutine locked to its OS thread.
//   - TCP rules apply to TCP sockets only: MPTCP (which Go's net.Listen
//     uses by default), SCTP and SMC sockets can bind and connect anywhere.
//     UDP, other socket families, connecting to pathname unix sockets and
//     most operations on already-open file descriptors are not mediated at
//     all. Pair Landlock with namespaces and seccomp.
package landlock

import "errors"

// ErrCgo is returned (wrapped) when the binary links cgo: the Go runtime can
// then not run a system call on every thread, so the calling process cannot
// be confined as a whole.
var ErrCgo = errors.New("landlock: cannot restrict all threads: the binary must be built with CGO_ENABLED=0 (syscall.AllThreadsSyscall is unsupported when cgo is linked)")

// Rules says what the sandbox may still do once restricted.
//
// Every path must exist when Restrict runs; a missing path is skipped and
// reported in Status.Missing. Symlinks are followed: the rule applies to the
// file or directory the path resolves to.
type Rules struct {
	// ReadExec: paths (dirs or files) under which reading and executing is
	// allowed (e.g. "/").
	ReadExec []string
	// ReadWrite: paths under which everything (create, write, remove,
	// truncate, make dirs/symlinks/regular files/fifos/sockets, refer/rename
	// across, ioctl on devices) is allowed (e.g. "/workspace", "/tmp").
	ReadWrite []string
	// Devices: character-device files that may be read, written and ioctl'd
	// (e.g. "/dev/null", "/dev/pts", "/dev/ptmx", "/dev/tty"); a directory
	// means everything beneath it.
	Devices []string
	// ConnectTCP / BindTCP: the only TCP ports that may be connected to /
	// bound (ABI >= 4). Empty means none.
	ConnectTCP []uint16
	BindTCP    []uint16
	// ScopeAbstractUnix and ScopeSignals (ABI >= 6): forbid connecting to
	// abstract unix sockets and signalling processes outside the domain.
	ScopeAbstractUnix bool
	ScopeSignals      bool
	// ExecFiles are open descriptors (O_PATH will do) of regular files
	// that may be read and executed wherever they are, though no path
	// rule reaches them: a sandbox's pid 1 keeps its own programs this way
	// (see inside/steward) after the root they came from is gone.
	ExecFiles []int `json:"-"`
}

// Status says what the kernel enforced.
type Status struct {
	// ABI is the kernel's Landlock ABI version; 0 means Landlock is
	// unavailable and nothing was enforced.
	ABI int
	// Filesystem, Network and Scopes say which families were enforced.
	// Network is enforced whenever the kernel supports it (ABI >= 4), even
	// with no ports listed, because empty port lists mean "no TCP".
	// Scopes is true when at least one requested scope was enforced.
	Filesystem, Network, Scopes bool
	// Missing lists, for humans, what the kernel could not enforce or what
	// was skipped, e.g. "tcp port rules need landlock ABI 4 (kernel 6.7)".
	Missing []string
}
