package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// runcBundle writes an OCI bundle (DIR/config.json + DIR/rootfs) whose
// sandbox is as close to ironclaw's defaults as the OCI spec says simply:
// its own pid, net (no interfaces but lo), ipc, uts, mount and cgroup
// namespaces, a read-only root holding only our static binaries, a tmpfs
// /tmp, an unprivileged user, no capabilities, a seccomp deny-list, and
// ironclaw's default memory, pids and CPU limits.
//
// It starts from `runc spec` so that everything we do not care about
// (masked paths, default mounts) is what the installed runc considers normal.
func runcBundle(args []string) error {
	fs := flag.NewFlagSet("runc-bundle", flag.ContinueOnError)
	from := fs.String("rootfs-from", "", "copy every regular file in this directory to the root of rootfs")
	runc := fs.String("runc", "runc", "runc binary whose `spec` output is the starting point")
	memory := fs.Int64("memory", 512<<20, "memory limit in bytes (ironclaw default)")
	pids := fs.Int64("pids", 256, "pids limit (ironclaw default)")
	cpus := fs.Float64("cpus", 1, "CPU bandwidth in CPUs (ironclaw default)")
	uid := fs.Int("uid", 65532, "uid and gid of the process (ironclaw's sandbox user)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: compare runc-bundle [flags] DIR ARGS...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() < 2 {
		fs.Usage()
		return errors.New("need a bundle directory and the process arguments")
	}
	dir, argv := fs.Arg(0), fs.Args()[1:]

	rootfs := filepath.Join(dir, "rootfs")
	// Mount points must exist: with a read-only root runc cannot create them.
	for _, d := range []string{"proc", "dev", "sys", "tmp"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return err
		}
	}
	if *from != "" {
		if err := copyFiles(*from, rootfs); err != nil {
			return err
		}
	}

	// runc spec refuses to overwrite a config.json.
	cfgPath := filepath.Join(dir, "config.json")
	if err := os.Remove(cfgPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if out, err := exec.Command(*runc, "spec", "--bundle", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("%s spec: %v: %s", *runc, err, out)
	}
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		return err
	}
	// A generic map, so every field runc wrote that we do not touch survives.
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("%s: %v", cfgPath, err)
	}

	cfg["root"] = map[string]any{"path": "rootfs", "readonly": true}
	cfg["hostname"] = "sandbox"
	proc := obj(cfg, "process")
	proc["terminal"] = false // stdio are pipes, as for every peer
	proc["args"] = argv
	proc["cwd"] = "/"
	proc["env"] = []string{"PATH=/"}
	proc["user"] = map[string]any{"uid": *uid, "gid": *uid}
	proc["capabilities"] = map[string]any{} // none at all, like ironclaw
	proc["noNewPrivileges"] = true

	cfg["mounts"] = append(list(cfg, "mounts"), map[string]any{
		"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
		"options": []string{"nosuid", "nodev", "mode=1777", "size=268435456"},
	})

	linux := obj(cfg, "linux")
	// runc spec gives pid, network, ipc, uts and mount; add cgroup. A user
	// namespace is left out: runc as root does not need one and Docker does
	// not use one by default (see bench/README.md).
	have := map[string]bool{}
	for _, ns := range list(linux, "namespaces") {
		if m, ok := ns.(map[string]any); ok {
			have[fmt.Sprint(m["type"])] = true
		}
	}
	for _, t := range []string{"pid", "network", "ipc", "uts", "mount", "cgroup"} {
		if !have[t] {
			linux["namespaces"] = append(list(linux, "namespaces"), map[string]any{"type": t})
		}
	}
	res := obj(linux, "resources")
	res["memory"] = map[string]any{"limit": *memory}
	res["pids"] = map[string]any{"limit": *pids}
	const period = 100000
	res["cpu"] = map[string]any{"quota": int64(*cpus * period), "period": period}
	linux["seccomp"] = seccompDenyList()

	out, err := json.MarshalIndent(cfg, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(cfgPath, append(out, '\n'), 0o644)
}

// seccompDenyList is a default-allow filter refusing the syscalls a sandbox
// has no business making, the same shape (not the same list) as ironclaw's
// filter: what we want to pay for is the cost of installing a filter of
// realistic size, not a particular policy.
func seccompDenyList() map[string]any {
	return map[string]any{
		"defaultAction": "SCMP_ACT_ALLOW",
		"architectures": []string{"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_AARCH64"},
		"syscalls": []map[string]any{{
			"action":   "SCMP_ACT_ERRNO",
			"errnoRet": 1, // EPERM
			"names": []string{
				"acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module",
				"delete_module", "finit_module", "fsconfig", "fsmount", "fsopen", "fspick",
				"get_kernel_syms", "get_mempolicy", "init_module", "ioperm", "iopl", "kcmp",
				"kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie", "mbind", "mount",
				"mount_setattr", "move_mount", "move_pages", "name_to_handle_at", "nfsservctl",
				"open_by_handle_at", "open_tree", "perf_event_open", "personality", "pivot_root",
				"process_vm_readv", "process_vm_writev", "ptrace", "query_module", "quotactl",
				"reboot", "request_key", "set_mempolicy", "setns", "settimeofday", "swapoff",
				"swapon", "sysfs", "syslog", "umount", "umount2", "unshare", "uselib",
				"userfaultfd", "ustat", "vhangup",
			},
		}},
	}
}

// obj returns m[key] as an object, creating it if missing.
func obj(m map[string]any, key string) map[string]any {
	if v, ok := m[key].(map[string]any); ok {
		return v
	}
	v := map[string]any{}
	m[key] = v
	return v
}

func list(m map[string]any, key string) []any {
	v, _ := m[key].([]any)
	return v
}

// copyFiles copies the regular files of src (not subdirectories) into dst,
// executable by anyone: the container runs as an unprivileged uid.
func copyFiles(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if err := copyFile(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
