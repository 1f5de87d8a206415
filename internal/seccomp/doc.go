// Package seccomp builds and installs the sandbox's system-call filter.
//
// The sandbox agent (pid 1 inside the sandbox) calls [Install] as the last
// step of its own confinement. The filter is attached to every thread of the
// agent and is inherited, irrevocably, by every process it later forks or
// execs, so it is the floor beneath everything an untrusted command can do.
//
// # Contract
//
// The filter is a deny list: a system call that is not named here is allowed.
// An allow list would be tighter, but the sandbox must run arbitrary
// toolchains (Go, glibc and musl programs, bash, python, node) whose needs we
// cannot enumerate; the other layers of the sandbox (namespaces, uid 65532,
// no capabilities, no_new_privs) already bound what ordinary calls can reach.
// The deny list removes the kernel interfaces that those layers do not
// neutralise or that have a history of privilege-escalation bugs:
//
//   - Mount and namespace manipulation (mount, the new mount API, pivot_root,
//     chroot, unshare, setns) and clone with any CLONE_NEW* flag: a command
//     must not build itself a fresh user namespace, in which it would hold
//     every capability and reach code paths meant for root.
//   - clone3 fails with ENOSYS rather than EPERM. Its flags live in memory,
//     where a seccomp filter cannot look, so it is refused outright; ENOSYS
//     makes glibc and the Go runtime fall back to clone, whose flags are a
//     register we can inspect.
//   - Debugging and cross-process memory access (ptrace, process_vm_readv,
//     process_vm_writev, pidfd_getfd), which would let one command inspect or
//     steer another one.
//   - Large kernel attack surfaces that ordinary programs do not need: bpf,
//     perf_event_open, io_uring, userfaultfd, the key-management calls,
//     fanotify_init, open_by_handle_at and name_to_handle_at.
//   - Host administration: modules, kexec, reboot, swap, the clocks, process
//     accounting, quotas, syslog, iopl/ioperm and obsolete calls that only
//     exist for old binaries.
//   - ioctl TIOCSTI and TIOCLINUX, which push keystrokes into a terminal that
//     someone else reads from.
//   - socket with protocol MPTCP or SCTP (EPROTONOSUPPORT, so programs fall
//     back to TCP): landlock's TCP port rules do not apply to them.
//   - mknod and mknodat of a character or block device (FIFOs, sockets and
//     regular files stay allowed). Elsewhere the user namespace or the
//     missing CAP_MKNOD refuses them too, but gVisor creates them and its
//     mounts ignore nodev: a made /dev/fuse or /dev/net/tun would open.
//
// Refused calls fail with EPERM, which programs already handle as "not
// allowed here"; they are not killed.
//
// # Architecture guard
//
// Before looking at the system-call number the filter checks the ABI the
// call came in through. A number only means something together with its ABI:
// on x86-64, 288 is accept4 for 64-bit code but keyctl for int $0x80, so a
// deny list written for one ABI is no protection against another. Any call
// from a foreign ABI (i386 through int $0x80, aarch32 compat) and any number
// with the x32 bit (0x40000000) set kills the whole process with SIGSYS.
// Falling through to the default action there would allow everything.
//
// [Denied] and [Restricted] describe the filter for `ironclaw doctor` and the
// documentation.
package seccomp
