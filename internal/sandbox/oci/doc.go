// Package oci is the sandbox backend that drives an OCI runtime binary:
// runc, crun or runsc (gVisor). It builds the same sandbox as the native
// backend from the same sandbox.Spec, but lets the runtime make the
// namespaces, mounts, cgroups and seccomp filter. This package is the host
// side; package helper is what runs inside.
//
// # Bundle
//
// Each sandbox is one bundle under <StateDir>/<runtime>/b/<id>:
//
//	config.json   the OCI spec (0600)
//	owner         "<pid>.<starttime>" of the daemon that made it: New removes
//	              the containers and bundles of owners that are gone
//	rootfs/       the container root, read-only. It holds nothing but mount
//	              points (made by us, root-owned, so the runtime never
//	              writes there) and, on merged-/usr hosts, the view's
//	              symlinks (/bin -> usr/bin, ...)
//	etc/          the synthetic /etc of internal/rootfs, bound read-only
//	sock/         the daemon's unix sockets, bound read-only at /.ironclaw/sock
//	exec/         one process.json per running exec or file operation
//
// The runtime's own state lives in <StateDir>/<runtime>/state (its --root),
// and the ironclaw binary is copied once to <StateDir>/<runtime>/ironclaw-
// oci-helper-<sha256 prefix>, from where it is bound read-only into every
// sandbox at /.ironclaw/ironclaw-oci-helper.
//
// config.json carries the seal of the native backend: process uid/gid 65532
// with no supplementary groups, every capability set empty, no_new_privs,
// RLIMIT_NOFILE; a seccomp profile built from internal/seccomp's deny list
// (see seccomp.go); a read-only root made of read-only, nosuid, nodev binds
// of the host-toolchain view (internal/rootfs) or of a directory image;
// tmpfs /workspace (0755, owned by 65532) and /tmp (1777) of the Spec's
// sizes; a private /dev tmpfs and devpts; /proc with the usual masked and
// read-only paths; a /sys holding only the sandbox's own cgroups,
// read-only, at /sys/fs/cgroup (see sysMounts); new pid, ipc, uts, mount,
// network (loopback only) and cgroup namespaces; and, on runc and crun, a
// user namespace mapping container ids 0-65535 to host 100000-165535, so
// container root is never host root. The cgroup (memory with swap equal to
// memory, pids, CPU quota, and a cpuset of ceil(cpus) CPUs so that the CPU
// count inside follows the limit) is created by the runtime beneath the
// daemon's own cgroup, at <own cgroup>/ironclaw-oci/<id> (see cgroup.go).
//
// pid 1 is protected from its workload: on runc and crun on cgroup v1 the
// pids limit is split (the cgroup allows sandbox.InitPidsReserve more
// tasks, and every exec runs in its child "workload", limited to the
// Spec's pids, through runc exec --cgroup), so a fork bomb cannot starve
// the agent of threads; the daemon lowers the agent's oom_score_adj where
// it may (CAP_SYS_RESOURCE), and every command starts at
// sandbox.WorkloadOOMScoreAdj (the exec front raises its own), so the OOM
// killer takes the workload first. When pid 1 dies anyway its control
// connection ends, and Done closes.
//
// # The agent
//
// The container's process is the ironclaw binary in its helper "agent"
// mode, started detached (run --detach). It refuses to run unless it is
// pid 1 and sealed, makes itself non-dumpable, ignores the signals code
// inside could send it, reaps orphans, serves the exposed ports, and
// connects once to the daemon's control socket (sock/ctl.sock). The daemon
// accepts exactly that one connection and removes the socket before Create
// returns, so no command can ever take the agent's place. The connection is
// the sandbox's lifeline: its end means pid 1 is gone (Done closes), and the
// daemon closing it (Destroy, or the daemon dying) makes the agent exit,
// which ends every process of the sandbox.
//
// Commands run with the runtime's exec and a full process.json (the same
// seal as the agent, never the runtime's defaults). Each starts through the
// helper's exec front, which changes to the working directory, resolves
// the command in PATH, forks it into a new session with stdout and stderr
// pipes of the front's own, writes one marked header line to stderr
// ("started <pid>" or why it cannot start), copies the command's output to
// its own until the command exits (plus at most 150 ms for what is still
// in flight) and exits with the command's status (128+N for a death by
// signal N). runc and runsc proxy an exec's stdio and wait for it to reach
// EOF; with the front in between, a process the command leaves in the
// background holds only the front's pipes, so the exec returns when the
// command exits, as on the native backend (later output is dropped). The
// header gives the 126/127 start failures exactly as the native backend
// reports them, and the pid lets the agent kill the command's whole process
// group on timeout or cancellation, inside the sandbox, on every runtime.
// The front is a Go program that stays for the command's life, so it never
// blocks a thread in a system call (one P, exit polled with WNOHANG, its
// stdio through the poller): its threads count against the pids limit, and
// a Go program refused a thread dies.
// File operations are the helper's write, read and list modes, run the same
// way: with the sandbox's uid, mounts and seccomp filter, resolving beneath
// /workspace or /tmp with openat2 RESOLVE_BENEATH, the data on stdin or
// stdout.
//
// # Gated programs
//
// A Spec.Gate is resolved by the daemon in the root the bundle describes
// (package gate); config.json binds a stub read-only over every path that
// reaches a gated program, after the root's own binds. The real programs
// go to the agent, open, beside the daemon's first message on the control
// connection, so only pid 1 (not dumpable) holds them. An approved exec
// (ExecRequest.Gate) arms the agent with its argv, environment and
// directory over the control connection and starts the helper's gate-exec
// front instead of the exec front: the agent checks argv[0] reaches that
// program's stub and starts the real program from an unreadable memory
// copy (0555 on runsc, which refuses to exec an unreadable file and hides
// another process's exe and mem anyway), with the front's pipes as its
// stdio; the front reports and copies as for any exec. See helper's
// gate.go for the protocol.
//
// # Exposed ports
//
// For each Spec.Network.ExposedTCP port the daemon listens on the unix
// socket sock/<port>.sock and Listener returns that listener. The agent
// listens on 127.0.0.1:<port> inside the sandbox's own network namespace
// and splices each connection to the socket (sockets on a read-only mount
// still accept connections). The sandbox never gets a network interface,
// the port exists nowhere on the host, and the same path works on runsc,
// whose network stack lives in the sentry where no host setns can reach.
//
// # Runtimes
//
//   - runc: everything above. Verified here with runc 1.1.5 on a cgroup v1
//     hybrid host.
//   - crun: the same spec. crun 1.8 refuses cgroup v1 hybrid hosts whose
//     unified hierarchy has controllers ("cgroups in hybrid mode not
//     supported, drop all controllers from cgroupv2"); New's probe container
//     detects it and returns sandbox.ErrUnsupported saying so.
//   - runsc: run with --platform=ptrace (no KVM needed), --network=none (a
//     sentry-internal loopback only), --host-uds=open (the sentry may
//     connect to the daemon's sockets) and --oci-seccomp (the profile is
//     enforced on the application by the sentry). gVisor does not use the
//     host user namespace mappings: container ids are identities inside the
//     sentry, which itself runs as an unprivileged host user in namespaces
//     of its own. Memory in Stats is the cgroup's, i.e. the whole sandbox's
//     cost to the host (sentry and gofer included), and a sandbox that
//     exceeds its memory limit is ended as a whole (the host OOM-kills the
//     sentry) unless the daemon acts first: the memory limit is enforced
//     by the daemon, which reads the cgroup's working set (every 50 ms,
//     every 5 ms above half the limit) and, above the limit, has the agent
//     SIGKILL the largest process inside (counted in OOMKills, the exec
//     reports OOMKilled and exit 137, as on runc); the host limit is a
//     backstop above it (limit + 64 MiB + limit/4), reached only by an
//     allocation faster than the watch. The pids limit is enforced inside,
//     by the sentry, as RLIMIT_NPROC on every command: the host pids
//     cgroup also holds the sentry's threads and the ptrace stubs (about
//     14-27 host tasks per sandbox task), and a sentry that cannot make a
//     thread dies with the sandbox, so the host limit is only a generous
//     backstop (32*pids+1024). This runsc gives every exec'd process the
//     very rlimit set of the container's process (ignoring process.json's
//     rlimits), so neither the agent nor the exec fronts may carry the
//     limit (a Go program refused a thread dies, and the agent's death
//     ends the sandbox): the front starts the command through the helper's
//     limit trampoline, which sets RLIMIT_NPROC (soft and hard) on itself
//     and execve's the command. runsc applies the OCI seccomp
//     profile to the container's first process only, not to what `runsc
//     exec` starts; the helper, the front of every exec and file
//     operation, therefore installs internal/seccomp's own filter whenever
//     it finds none in force. The 2022 sentry has no openat2, so file
//     operations resolve component by component with O_NOFOLLOW, refusing
//     every symlink. It refuses coreutils 9's statx (`ls -l`, `stat` fail
//     with EINVAL). Its /sys, /dev and cgroups are its own, made to match
//     the other backends': an empty read-only tmpfs at /sys hides its
//     sysfs, and --cgroupfs mounts its cgroupfs (memory, cpu) at
//     /sys/fs/cgroup; its devtmpfs also holds /dev/fuse and /dev/net/tun,
//     and mknod of devices works there (seccomp refuses it). So on runsc
//     alone the agent starts holding CAP_CHOWN, CAP_DAC_OVERRIDE,
//     CAP_FOWNER and CAP_SETPCAP, over the sentry's files only: before
//     anything else runs it removes the extra device nodes, writes the
//     Spec's limits into the cgroupfs, adds a pids directory with the pids
//     limit, makes the tmpfs beneath 0755, and drops every capability
//     (helper.GVisorSetupFlag). The kernel's OOM killer never chooses among
//     a gVisor sandbox's processes (the daemon does, never pid 1), and the
//     pids limit already leaves the agent and the exec fronts free
//     (RLIMIT_NPROC on commands only).
//
// # What differs from the native backend
//
// There is no landlock layer: writes are confined by the read-only root and
// mounts, and TCP binds and connects reach only the sandbox's own network
// namespace, where nothing but the agent listens. (Without landlock a
// command may lower its own oom_score_adj back to what the runtime gave
// it: the agent's, where the daemon could not lower the agent's; the OOM
// killer then chooses between them by size.) The tmpfs under the v1 cgroup
// view, and gVisor's cgroupfs, are mounted writable, but root's and mode
// 0755 or 0555: the sandbox user cannot write them. The CPU count is fixed
// at create. /dev/shm does not exist
// (native points it at /tmp). Terminals (ExecRequest.TTY) are not offered:
// Exec returns sandbox.ErrUnsupported. ExecResult.Signal is only known when
// IronClaw sent the signal (timeout, cancellation) or the OOM killer did;
// runtimes report other deaths by signal only as exit code 128+N. The
// architecture guard of runc's and crun's libseccomp kills the calling
// thread, not the whole process as the native filter does (the call never
// returns either way). The helper is a Go program and needs a few threads
// to start, so while a sandbox sits at its pids limit new execs fail to
// start (an error, not an exit code) until processes end; on runc and crun
// the pids cgroup also counts the agent's and the running fronts' threads
// (a few each). Bind
// sources (Spec.Workspace, Spec.Mounts, a directory root) are opened by the
// runtime as the container's root (host uid 100000 on runc and crun), so
// they must be reachable by that uid.
package oci
