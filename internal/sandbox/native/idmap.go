package native

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// Why the daemon writes a sandbox's id maps itself, after the init has
// started.
//
// Go starts a child in a new user namespace with a plain fork: it must
// write the child's id maps while the child waits, so it cannot share the
// parent's memory and suspend the parent as it does for every other child
// (CLONE_VM|CLONE_VFORK). A plain fork of a daemon copies its page tables
// and write-protects every page it has; every page the daemon writes
// afterwards takes a fault to be made writable again. On the 2-core VMs
// we measure on, a fault costs 17-20 µs, and a daemon that forked for a
// create then paid about 670 of them, some 12 ms of its CPU, spread over
// whatever it did next: the audit commit, the HTTP answer, the next
// create.
//
// So the init is cloned with CLONE_VM|CLONE_VFORK like any other child,
// into the new namespaces, and executes at once with no ids mapped. The
// daemon then writes the maps here, before it sends the init anything;
// the init reads its plan (or Config) first, then refuses to go on
// unless the maps are there and leave host root out, and becomes uid and
// gid 0 of its namespace where that is mapped (root mode). An exec with
// no uid 0 keeps no capabilities, so the clone raises the bounding set's
// capabilities as ambient ones; they last until the seal, which empties
// every set (the ambient one with the inheritable one) and checks that
// it did.

// idMaps are a sandbox's user namespace maps, as /proc/<pid>/*_map take
// them.
type idMaps struct {
	uid, gid  string
	setgroups string // "allow" or "deny"
}

// sandboxIDMaps are the maps of a root-mode daemon (container 0..65535 at
// base) or a rootless one (the sandbox user alone, as the daemon's uid).
func sandboxIDMaps(rootless bool, base int) idMaps {
	if rootless {
		return idMaps{
			uid:       fmt.Sprintf("%d %d 1\n", sandbox.UID, os.Getuid()),
			gid:       fmt.Sprintf("%d %d 1\n", sandbox.GID, os.Getgid()),
			setgroups: "deny", // an unprivileged map requires it
		}
	}
	// "allow", so the init can drop the daemon's supplementary groups
	// (host gid 0 among them) with setgroups([]).
	return idMaps{uid: fmt.Sprintf("0 %d 65536\n", base), gid: fmt.Sprintf("0 %d 65536\n", base), setgroups: "allow"}
}

// write gives the child pid its maps. pid is a child the caller has not
// waited for, so it names no other process.
func (m idMaps) write(pid int) error {
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	// setgroups before gid_map: the kernel takes it only while no gid map
	// is written.
	for _, f := range [...]struct{ name, data string }{{"setgroups", m.setgroups}, {"gid_map", m.gid}, {"uid_map", m.uid}} {
		if err := os.WriteFile(dir+f.name, []byte(f.data), 0); err != nil {
			return fmt.Errorf("writing the sandbox's %s: %w", f.name, err)
		}
	}
	return nil
}

// boundingCaps are the capabilities of this process's bounding set: what
// a child in a new user namespace may raise as ambient capabilities, and
// what it would have held had it executed as that namespace's root. The
// kernel sets no bit above its last capability there.
func boundingCaps() ([]uintptr, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		hex, ok := strings.CutPrefix(line, "CapBnd:")
		if !ok {
			continue
		}
		set, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("CapBnd %q: %w", hex, err)
		}
		var caps []uintptr
		for c := range 64 {
			if set&(1<<c) != 0 {
				caps = append(caps, uintptr(c))
			}
		}
		return caps, nil
	}
	return nil, fmt.Errorf("no CapBnd in /proc/self/status")
}

// initCloneFlags are flags, the sandbox's namespaces, with the two that
// make the clone share the daemon's memory until the init executes (see
// the top of this file). Go's syscall package adds these itself to every
// clone but one into a new user namespace, and otherwise passes
// Cloneflags to the kernel as they are.
func initCloneFlags(flags uintptr) uintptr {
	return flags | syscall.CLONE_VM | syscall.CLONE_VFORK
}
