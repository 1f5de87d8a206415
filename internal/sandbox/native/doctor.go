package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/cgroups"
	"github.com/ironclaw/ironclaw/internal/landlock"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/seccomp"
	"golang.org/x/sys/unix"
)

// Finding is one line of `ironclaw doctor`.
type Finding struct {
	Feature  string
	OK       bool
	Required bool // without it the native runtime refuses to run
	Detail   string
	Fix      string
}

// Diagnose checks, feature by feature, whether this host enforces what the
// native backend relies on, and ends with a real sandbox as proof. exe is
// the sandbox init to prove (Options.Exe; "" is this binary).
func Diagnose(ctx context.Context, exe string) []Finding {
	var out []Finding
	add := func(f Finding) { out = append(out, f) }

	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_GETPID, 0, 0, 0); e == syscall.ENOTSUP && exe == "" {
		add(Finding{Feature: "cgo-free build", Required: true, Detail: "built with cgo: per-thread security calls are unavailable to this binary as the sandbox init", Fix: "rebuild with CGO_ENABLED=0, or put a CGO_ENABLED=0 ironclaw-sandbox of the same build beside it (make build)"})
	} else if e == syscall.ENOTSUP {
		add(Finding{Feature: "cgo-free build", OK: true, Required: true, Detail: "built with cgo, but the sandbox init is the cgo-free " + exe})
	} else {
		add(Finding{Feature: "cgo-free build", OK: true, Required: true, Detail: "per-thread security calls available"})
	}

	if os.Geteuid() == 0 {
		add(Finding{Feature: "user namespaces", OK: true, Required: true, Detail: fmt.Sprintf("root: sandbox ids map to host %d-%d, never to host root", DefaultHostIDBase, DefaultHostIDBase+65535)})
	} else if err := CheckUserNamespaces(); err != nil {
		add(Finding{Feature: "user namespaces", Required: true, Detail: err.Error(), Fix: "see the detail, or run as root"})
	} else {
		add(Finding{Feature: "user namespaces", OK: true, Required: true, Detail: "rootless: sandbox uid 65532 maps to your own uid"})
	}

	var missing []string
	for _, ns := range []string{"user", "pid", "mnt", "net", "ipc", "uts", "cgroup"} {
		if _, err := os.Stat("/proc/self/ns/" + ns); err != nil {
			missing = append(missing, ns)
		}
	}
	if len(missing) > 0 {
		add(Finding{Feature: "namespaces", Required: true, Detail: "missing: " + strings.Join(missing, ", "), Fix: "use a kernel built with CONFIG_USER_NS, PID_NS, NET_NS, IPC_NS, UTS_NS and CGROUPS"})
	} else {
		add(Finding{Feature: "namespaces", OK: true, Required: true, Detail: "user, pid, mount, net, ipc, uts, cgroup"})
	}

	if h, err := cgroups.Detect(); err != nil {
		add(Finding{Feature: "cgroups (memory, pids, cpu)", Required: true, Detail: err.Error(), Fix: "run as root, or give ironclaw a delegated cgroup v2 subtree: systemd-run --user -p Delegate=yes --scope ironclaw ..."})
	} else if cg, err := h.Create(fmt.Sprintf("ic-doctor-%d", os.Getpid()), cgroups.Limits{MemoryBytes: 64 << 20, Pids: 16, CPUs: 1}); err != nil {
		add(Finding{Feature: "cgroups (memory, pids, cpu)", Required: true, Detail: err.Error(), Fix: "run as root, or give ironclaw a delegated cgroup v2 subtree: systemd-run --user -p Delegate=yes --scope ironclaw ..."})
	} else {
		_ = cg.Destroy(ctx)
		add(Finding{Feature: "cgroups (memory, pids, cpu)", OK: true, Required: true, Detail: h.Describe()})
	}

	abi, err := landlock.ABI()
	switch {
	case err != nil || abi == 0:
		add(Finding{Feature: "landlock", Detail: fmt.Sprintf("unavailable (%v): filesystem writes are still confined by the read-only root", err),
			Fix: "use Linux >= 5.13 with landlock in the lsm= boot parameter (e.g. lsm=landlock,lockdown,yama,integrity,apparmor)"})
	default:
		var have, lack []string
		have = append(have, "filesystem")
		for _, f := range []struct {
			abi  int
			name string
		}{{4, "TCP ports (6.7)"}, {5, "device ioctls (6.10)"}, {6, "abstract-socket and signal scoping (6.12)"}} {
			if abi >= f.abi {
				have = append(have, f.name)
			} else {
				lack = append(lack, f.name)
			}
		}
		fd := Finding{Feature: "landlock", OK: len(lack) == 0, Detail: fmt.Sprintf("ABI %d: %s", abi, strings.Join(have, ", "))}
		if len(lack) > 0 {
			fd.Detail += "; not enforced: " + strings.Join(lack, ", ")
			fd.Fix = "a newer kernel adds: " + strings.Join(lack, ", ")
		}
		add(fd)
	}

	if mode, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		add(Finding{Feature: "seccomp", Required: true, Detail: err.Error(), Fix: "use a kernel built with CONFIG_SECCOMP_FILTER"})
	} else {
		_ = mode
		add(Finding{Feature: "seccomp", OK: true, Required: true, Detail: fmt.Sprintf("filter with arch guard; %d system calls denied", len(seccomp.Denied()))})
	}

	err = unix.MountSetattr(-1, "", 0, &unix.MountAttr{})
	if errors.Is(err, unix.ENOSYS) {
		add(Finding{Feature: "mount_setattr", Detail: "absent (Linux < 5.12): read-only binds fall back to a non-recursive remount", Fix: "Linux >= 5.12"})
	} else {
		add(Finding{Feature: "mount_setattr", OK: true, Detail: "recursive read-only binds"})
	}
	if _, err := unix.Openat2(-1, "", &unix.OpenHow{}); errors.Is(err, unix.ENOSYS) {
		add(Finding{Feature: "openat2", Detail: "absent (Linux < 5.6): file copies rely on the sandbox's confinement alone", Fix: "Linux >= 5.6"})
	} else {
		add(Finding{Feature: "openat2", OK: true, Detail: "file paths resolve beneath /workspace and /tmp"})
	}

	add(smokeTest(ctx, exe))
	return out
}

// smokeTest creates a real sandbox and checks who runs inside.
func smokeTest(ctx context.Context, exe string) Finding {
	f := Finding{Feature: "sealed sandbox", Required: true}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rt, err := New(ctx, Options{Exe: exe})
	if err != nil {
		f.Detail, f.Fix = err.Error(), "fix the lines above"
		return f
	}
	defer rt.Close(context.Background())
	start := time.Now()
	sb, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		f.Detail, f.Fix = err.Error(), "run with --verbose for the sandbox init's own words"
		return f
	}
	created := time.Since(start)
	defer sb.Destroy(context.Background())
	var out bytes.Buffer
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "id -u; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t' ' '"}, Stdout: &out})
	if err != nil || res.ExitCode != 0 {
		f.Detail = fmt.Sprintf("exec failed: %v (exit %d)", err, res.ExitCode)
		return f
	}
	got := strings.Fields(out.String())
	want := []string{"65532", "CapEff:", "0000000000000000", "NoNewPrivs:", "1", "Seccomp:", "2"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		f.Detail = "unexpected identity inside: " + strings.Join(got, " ")
		return f
	}
	f.OK = true
	f.Detail = fmt.Sprintf("created in %v; uid 65532, no capabilities, no_new_privs, seccomp", created.Round(100*time.Microsecond))
	return f
}
