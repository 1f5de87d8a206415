package landlock

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// maxKnownABI is the newest Landlock ABI whose semantics this package knows.
// A newer kernel is driven as if it were this ABI: rights added later are
// not handled (so they stay allowed) until this package learns about them.
const maxKnownABI = 8

// Filesystem access rights, grouped by the ABI that introduced them.
const (
	// fsRightsABI1 is every filesystem right of the first Landlock ABI
	// (kernel 5.13).
	fsRightsABI1 = unix.LANDLOCK_ACCESS_FS_EXECUTE |
		unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_CHAR |
		unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG |
		unix.LANDLOCK_ACCESS_FS_MAKE_SOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_FIFO |
		unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM

	// fileRights are the only rights the kernel accepts in a path-beneath
	// rule whose target is not a directory (it answers EINVAL otherwise):
	// the other rights describe operations on directory entries.
	fileRights = unix.LANDLOCK_ACCESS_FS_EXECUTE |
		unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_TRUNCATE |
		unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
)

// What each kind of rule grants, before masking by what the kernel handles
// and by whether the target is a directory.
const (
	grantReadExec = unix.LANDLOCK_ACCESS_FS_EXECUTE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_DIR
	// grantReadWrite is everything: it is intersected with the handled set.
	grantReadWrite = ^uint64(0)
	// READ_DIR lets a Devices directory such as /dev/pts be listed; it is
	// dropped for device files by the file mask.
	grantDevice = unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_IOCTL_DEV |
		unix.LANDLOCK_ACCESS_FS_READ_DIR
)

// LANDLOCK_RULE_NET_PORT and struct landlock_net_port_attr (linux 6.7,
// include/uapi/linux/landlock.h) are not defined by golang.org/x/sys v0.50.0.
const ruleNetPort = 2

// netPortAttr mirrors struct landlock_net_port_attr.
type netPortAttr struct {
	allowedAccess uint64
	port          uint64
}

// fsRights returns the filesystem rights a kernel of the given ABI handles.
func fsRights(abi int) uint64 {
	if abi < 1 {
		return 0
	}
	r := uint64(fsRightsABI1)
	if abi >= 2 {
		r |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		r |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 5 {
		r |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	return r
}

// netRights returns the network rights a kernel of the given ABI handles.
func netRights(abi int) uint64 {
	if abi < 4 {
		return 0
	}
	return unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
}

// scopeRights returns the scopes a kernel of the given ABI supports.
func scopeRights(abi int) uint64 {
	if abi < 6 {
		return 0
	}
	return unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
}

// requestedScopes converts the Rules booleans to scope bits.
func requestedScopes(r Rules) uint64 {
	var s uint64
	if r.ScopeAbstractUnix {
		s |= unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
	}
	if r.ScopeSignals {
		s |= unix.LANDLOCK_SCOPE_SIGNAL
	}
	return s
}

// pathGrant returns the rights to grant on one path: what the rule wants,
// limited to what the ruleset handles (the kernel rejects anything else with
// EINVAL), and to file rights when the target is not a directory.
func pathGrant(want, handled uint64, isDir bool) uint64 {
	g := want & handled
	if !isDir {
		g &= fileRights
	}
	return g
}

// rulesetAttrSize returns how many bytes of struct landlock_ruleset_attr a
// kernel of the given ABI understands. The struct grew over time and older
// kernels reject a larger size unless the tail is zero; passing exactly the
// part we fill keeps the request meaningful on every kernel.
func rulesetAttrSize(abi int) uintptr {
	switch {
	case abi >= 6:
		return 24 // handled_access_fs, handled_access_net, scoped
	case abi >= 4:
		return 16 // handled_access_fs, handled_access_net
	default:
		return 8 // handled_access_fs
	}
}

// limitations describes, for humans, what a kernel of the given ABI cannot
// enforce from r. It does not cover per-path problems or errata.
func limitations(abi int, r Rules) []string {
	var out []string
	if abi < 2 {
		out = append(out, "renaming or linking files across directories is always denied: REFER needs landlock ABI 2 (kernel 5.19)")
	}
	if abi < 3 {
		out = append(out, "truncate is not restricted: needs landlock ABI 3 (kernel 6.2)")
	}
	if abi < 4 {
		out = append(out, "tcp port rules need landlock ABI 4 (kernel 6.7): TCP bind and connect are not restricted")
	}
	if abi < 5 {
		out = append(out, "ioctl on devices is not restricted: needs landlock ABI 5 (kernel 6.10)")
	}
	if abi < 6 {
		if r.ScopeAbstractUnix {
			out = append(out, "abstract unix socket scoping needs landlock ABI 6 (kernel 6.12)")
		}
		if r.ScopeSignals {
			out = append(out, "signal scoping needs landlock ABI 6 (kernel 6.12)")
		}
	}
	if abi > maxKnownABI {
		out = append(out, fmt.Sprintf("kernel landlock ABI %d is newer than this package knows (%d): access rights added since are not restricted", abi, maxKnownABI))
	}
	return out
}
