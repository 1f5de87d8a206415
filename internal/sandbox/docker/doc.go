// Package docker is the sandbox backend for hosts where Docker is what
// people have: it builds the same sandbox as the native and oci backends
// from the same sandbox.Spec, as one container created through the Docker
// Engine API (package engine: a small client on net/http over dockerd's
// unix socket, API version 1.41 or newer; the moby client's dependencies
// cost every ironclaw process start ~5 ms of package init). In-sandbox it
// reuses the oci backend's helper (package oci/helper) unchanged: the
// agent as pid 1, the exec front, and the confined file operations.
//
// # The container
//
// Create makes one container per sandbox, named ironclaw-<id>, from an
// image that holds no files: ironclaw/empty:1, or for a root with top-level
// symlinks (a merged-/usr host's /bin -> usr/bin) ironclaw/root:<hash>,
// whose only entries are those symlinks. New imports such an image once
// through ImageImport; nothing is ever pulled. Everything else the root
// has is a bind mount planned by internal/rootfs, exactly as on the other
// backends: read-only binds of the host's /usr, /bin, /sbin and /lib* (or
// of a directory root's entries) and a synthetic /etc written into the
// sandbox's state directory. The seal, as Docker settings:
//
//	User 65532:65532        numeric; the synthetic /etc/group lists no
//	                        member, so there are no supplementary groups
//	CapDrop ALL             every set empty (bounding included)
//	no-new-privileges       and seccomp=<profile>: internal/seccomp's deny
//	                        list (seccomp.go), replacing Docker's default
//	NetworkMode none        a network namespace with only lo
//	ReadonlyRootfs          plus read-only binds; only /workspace and /tmp
//	                        are writable: tmpfs of the Spec's sizes (0755
//	                        owned by 65532, and 1777), or Spec.Workspace
//	IpcMode none            a private IPC namespace without /dev/shm
//	CgroupnsMode private    the container sees only its own cgroups
//	Resources               Memory, MemorySwap = Memory (no swap),
//	                        PidsLimit, NanoCPUs (capped at the host's CPUs),
//	                        CpusetCpus: ceil(cpus) CPUs, so the CPU count
//	                        inside follows the limit
//	Ulimits                 nofile = Limits.OpenFiles; msgqueue = 0
//	Masked/ReadonlyPaths    Docker's defaults (/proc/kcore, /proc/keys,
//	                        /proc/sys read-only, ...), kept; and every entry
//	                        of /sys and /sys/fs but /sys/fs/cgroup masked:
//	                        the sandbox sees its own cgroups (dockerd's
//	                        read-only cgroup mount) and nothing else there
//	Labels                  ironclaw.owner=<pid>.<starttime>, .sandbox,
//	                        .state: New removes the containers and state of
//	                        owners that are gone, never a live owner's
//
// dockerd bind-mounts its own /etc/hostname, /etc/hosts and
// /etc/resolv.conf into every container that has a network namespace, and
// its resolv.conf carries the host's name servers. We bind our synthetic
// files at those three paths, which makes dockerd skip its own. A
// directory root with its own /etc must therefore hold those three files
// (a mount point cannot be made inside a read-only bind); Create returns
// sandbox.ErrUnsupported saying so otherwise.
//
// Each sandbox has a host state directory, <StateDir>/b/<id>: owner, etc/
// and sock/, the daemon's unix sockets, bound read-only at /.ironclaw/sock.
// The ironclaw binary is copied once to <StateDir>/ironclaw-docker-helper-
// <sha256 prefix> and bound read-only at /.ironclaw/ironclaw-oci-helper.
//
// # The agent, commands and files
//
// The container's process is the helper's agent, as on the oci backend (see
// that package's documentation): pid 1, non-dumpable, ignoring signals from
// inside, serving the exposed ports, and connected once to the daemon's
// control socket, whose end is the sandbox's end (Done). Commands are
// ExecCreate + ExecAttach as user 65532:65532; dockerd starts each from the
// container's own process spec, so it carries the same capabilities,
// no_new_privs, seccomp filter and rlimits. Each runs through the helper's
// exec front, whose header on stderr gives 126/127 exactly and the pid
// whose process group the agent kills on timeout or cancellation (exit
// 137, TimedOut). The multiplexed stream is split with stdcopy; the
// output cap counts every byte and keeps the first OutputBytes. The exit
// code comes from ExecInspect. File operations are the helper's write,
// read and list modes run the same way (never `docker cp`, which dockerd
// performs as root), confined beneath /workspace or /tmp with openat2
// RESOLVE_BENEATH.
//
// Exposed ports work as on the oci backend: the daemon listens on
// sock/<port>.sock, the agent on 127.0.0.1:<port> inside the container's
// own network namespace, and splices each connection to the socket. No
// port is published; the container has no interface but lo.
//
// Gated programs (Spec.Gate) work as on the oci backend: their stubs are
// read-only binds among the container's mounts, the agent gets the real
// programs on its control connection and starts approved execs itself.
//
// # What Docker adds, and what it lacks
//
// dockerd runs as root and is the one creating the container: a sandbox's
// seal is only as good as the settings above, which dockerd applies, and
// anyone who can reach the Docker socket is root on the host. IronClaw
// never binds that socket into a sandbox, and only a daemon on a local unix
// socket is accepted (binds name host paths, and owners are host pids).
//
// userns-remap is not enabled by default, and Docker cannot enable it per
// container: HostConfig.UsernsMode only lets a container opt out ("host")
// of a daemon-wide remap. Without it the sandbox user 65532 is host uid
// 65532, which other containers running as 65532 share (the native and oci
// backends map it to host 165532 through a user namespace of the sandbox's
// own), and a kernel bug that lets a command become container root makes it
// host root. The seal keeps container root out of reach (no capabilities,
// no_new_privs, the seccomp deny list refuses unshare and CLONE_NEW*), but
// the user-namespace layer is missing. To add it, start dockerd with
// --userns-remap=default (or "userns-remap" in daemon.json); every
// container then runs in a user namespace and UsernsRemap reports true.
// IronClaw's bind sources (sockets 0666, /etc 0444, the helper 0755) work
// under remap unchanged.
//
// pid 1 is the OOM killer's last choice: the daemon lowers the agent's
// oom_score_adj where it may (CAP_SYS_RESOURCE; not through
// HostConfig.OomScoreAdj, which a dockerd without it would refuse), and
// every command starts at sandbox.WorkloadOOMScoreAdj (the exec front
// raises its own). When the agent dies its control connection ends, and
// Done closes.
//
// Other differences from the native backend: dockerd starts every exec in
// the container's own cgroup, so the agent shares the pids limit with the
// workload (no PIDs reserved for it: a fork bomb can starve it of threads,
// which ends the sandbox); the masked /sys entries show as empty
// directories, and the tmpfs under the cgroup mounts is root's, mode
// 0755, but mounted writable; binds cannot be made nosuid
// or nodev (no_new_privs makes set-uid bits inert; no device is reachable
// through the host view); /dev/mqueue is mounted, and RLIMIT_MSGQUEUE = 0
// keeps anything from being queued there (its quota is per host uid, so
// sandboxes would otherwise share it). Every command's environment has
// HOSTNAME set (dockerd adds it). A command that leaves a background
// process holding its stdout or stderr returns about 2s after it exited
// (dockerd's grace for the stream), not 200ms as on the oci backend.
// Terminals (ExecRequest.TTY) are not offered yet: Exec returns
// sandbox.ErrUnsupported. ExecResult.Signal is only known when IronClaw
// sent the signal or the OOM killer did (OOM kills are read from the
// container's memory cgroup, found through its pid 1; dockerd does not
// report them per exec). Each exec costs dockerd's API round trips and a
// runtime exec: about 50ms on this host, against a few ms natively.
//
// # gVisor
//
// With Options.Runtime "runsc" (registered with dockerd in daemon.json,
// with runtimeArgs --platform=ptrace, --network=none, --host-uds=open and
// --oci-seccomp, as the oci backend passes them) the same container runs
// under gVisor; Name is "docker-runsc". The oci backend's notes on runsc
// apply: the pids limit is enforced inside as RLIMIT_NPROC with the host
// cgroup only a backstop, a sandbox over its memory limit ends as a whole,
// and the 2022 sentry's /sys lists no interfaces and refuses coreutils 9's
// statx.
package docker
