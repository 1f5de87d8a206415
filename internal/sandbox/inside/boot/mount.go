package boot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ironclaw/ironclaw/internal/rootfs"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

// setUp builds the sandbox from cfg; it runs as root of the new user
// namespace, before the seal.
func setUp(cfg *wire.Config, trees []*os.File) ([]*os.File, error) {
	if cfg.UnshareCgroup {
		// cgroup v1: the daemon has placed us into our cgroups by now, so
		// the namespace is rooted at the sandbox's own cgroup.
		if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			return nil, fmt.Errorf("cgroup namespace: %w", err)
		}
	}
	if err := rootfs.Check(cfg.Seal.Root); err != nil {
		return nil, err
	}
	if err := buildRoot(cfg, trees); err != nil {
		return nil, err
	}
	if err := unix.Sethostname([]byte(cfg.Seal.Hostname)); err != nil {
		return nil, fmt.Errorf("hostname: %w", err)
	}
	if err := loopbackUp(); err != nil {
		return nil, err
	}
	if err := pinCPUs(cfg.CPUs); err != nil {
		return nil, err
	}
	oom, err := openOOMAdj(cfg.WorkloadOOMScoreAdj)
	if err != nil {
		return nil, err
	}
	initOOM = oom
	listeners, err := listenExposed(cfg.Listen)
	if err != nil {
		return nil, err
	}
	if err := applySeal(cfg); err != nil {
		wire.CloseAll(listeners)
		return nil, err
	}
	return listeners, nil
}

// newRootCandidates are where the new root is assembled before
// pivot_root; all are shadowed only inside our private mount namespace.
var newRootCandidates = []string{"/tmp", "/mnt", "/run", "/dev"}

// buildRoot builds cfg.Seal's root and mounts in a tmpfs and makes it "/".
func buildRoot(cfg *wire.Config, trees []*os.File) error {
	sl := &cfg.Seal
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	// Open every host source before anything is mounted: the root is
	// assembled on a host directory (normally /tmp), which then hides what
	// lies beneath it, a test binary or an image directory for instance.
	sources := map[string]source{}
	for i, p := range cfg.Sources {
		if i < len(trees) {
			sources[p] = source{path: fmt.Sprintf("/proc/self/fd/%d", trees[i].Fd()), tree: int(trees[i].Fd())}
		}
	}
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	open := func(p string) error {
		if _, ok := sources[p]; ok {
			return nil
		}
		fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", p, err)
		}
		fds = append(fds, fd)
		sources[p] = source{path: fmt.Sprintf("/proc/self/fd/%d", fd), tree: -1}
		return nil
	}
	for _, e := range sl.Root {
		if e.Source != "" {
			if err := open(e.Source); err != nil {
				return err
			}
		}
	}
	for _, m := range sl.Mounts {
		if m.Kind == seal.KindBind || m.Kind == seal.KindCopy {
			if err := open(m.Source); err != nil {
				return err
			}
		}
	}
	for _, d := range hostDevices(sl) {
		if err := open(d); err != nil {
			return err
		}
	}

	root := ""
	for _, c := range newRootCandidates {
		if st, err := os.Stat(c); err == nil && st.IsDir() {
			root = c
			break
		}
	}
	if root == "" {
		return errors.New("no directory to assemble the root in")
	}
	// 4m: the synthetic /etc, mount points, and up to
	// rootfs.MaxAlternatives links (a target beyond 128 bytes takes a page).
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=4m,nr_inodes=4096,mode=0755"); err != nil {
		return fmt.Errorf("root tmpfs: %w", err)
	}
	at := func(p string) string { return filepath.Join(root, p) }

	for _, e := range sl.Root {
		if err := makeEntry(at(e.Path), e, sources[e.Source]); err != nil {
			return fmt.Errorf("root entry %s: %w", e.Path, err)
		}
	}
	for _, m := range sl.Mounts {
		if err := makeMount(at(m.Target), m, sl, cfg.Cgroup, sources); err != nil {
			return fmt.Errorf("mount %s: %w", m.Target, err)
		}
	}
	if err := maskPaths(root, sl); err != nil {
		return err
	}
	if err := maskGated(cfg, root); err != nil {
		return err
	}
	// The root itself: nothing may be created at the top level.
	if err := unix.Mount("", root, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("read-only root: %w", err)
	}
	return pivot(root)
}

// makeMount makes one of the seal's mounts at p, in the root being built.
func makeMount(p string, m seal.Mount, sl *seal.Seal, view wire.CgroupView, sources map[string]source) error {
	switch m.Kind {
	case seal.KindDev:
		return makeDev(p, m, sl, sources)
	case seal.KindProc:
		if err := os.Mkdir(p, 0o555); err != nil {
			return err
		}
		return unix.Mount("proc", p, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	case seal.KindCgroupView:
		if m.Target != "/sys/fs/cgroup" {
			return fmt.Errorf("the cgroup view belongs at /sys/fs/cgroup")
		}
		return makeSys(filepath.Dir(filepath.Dir(p)), view)
	case seal.KindTmpfs:
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		return unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, m.TmpfsOptions())
	case seal.KindBind:
		return bindMount(sources[m.Source], p, m.ReadOnly)
	case seal.KindCopy:
		// The daemon's files, which it does not change while the sandbox
		// runs: a read-only bind shows what a copy would.
		return bindMount(sources[m.Source], p, true)
	}
	return fmt.Errorf("unknown mount kind %q", m.Kind)
}

// hostDevices are the host device nodes bound into the sandbox's /dev: a
// user namespace cannot mknod, so they are binds of the host's nodes. The
// devpts instance provides the rest (/dev/pts/ptmx).
func hostDevices(sl *seal.Seal) []string {
	var out []string
	for _, d := range sl.DeviceNodes {
		if filepath.Dir(d) == "/dev" {
			out = append(out, d)
		}
	}
	return out
}

// source is an opened host path: a detached mount tree from the daemon
// (tree >= 0) or an O_PATH descriptor the child opened itself.
type source struct {
	path string // /proc/self/fd/N
	tree int
}

func makeEntry(p string, e rootfs.Entry, src source) error {
	switch e.Kind {
	case rootfs.KindDir:
		// rootfs.Check has the plan make a directory's parent first.
		return os.Mkdir(p, os.FileMode(e.Mode)|0o700)
	case rootfs.KindFile:
		return os.WriteFile(p, []byte(e.Content), os.FileMode(e.Mode))
	case rootfs.KindSymlink:
		return os.Symlink(e.Target, p)
	case rootfs.KindBindDir, rootfs.KindBindFile:
		return bindMount(src, p, true)
	}
	return fmt.Errorf("unknown kind %q", e.Kind)
}

// bindMount binds host path src at dst (creating the mount point) and, when
// readOnly, makes it and everything below it read-only. Binds are always
// nosuid and nodev.
func bindMount(src source, dst string, readOnly bool) error {
	st, err := os.Stat(src.path)
	if err != nil {
		return err
	}
	if st.IsDir() {
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
	} else {
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_RDONLY, 0o644)
		if err != nil {
			return err
		}
		f.Close()
	}
	if src.tree >= 0 {
		if err := unix.MoveMount(src.tree, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("attach mount: %w", err)
		}
	} else if err := unix.Mount(src.path, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	attr := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if readOnly {
		attr |= unix.MOUNT_ATTR_RDONLY
	}
	return setMountAttr(dst, attr)
}

// setMountAttr adds attributes to a mount and every mount below it. Older
// kernels (before 5.12) get a remount of the top mount that repeats the
// flags the user namespace has locked, or the kernel refuses it.
func setMountAttr(p string, attr uint64) error {
	err := unix.MountSetattr(-1, p, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: attr})
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("mount_setattr %s: %w", p, err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(p, &sfs); err != nil {
		return err
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT)
	for st, ms := range map[int64]uintptr{unix.ST_NOSUID: unix.MS_NOSUID, unix.ST_NODEV: unix.MS_NODEV, unix.ST_NOEXEC: unix.MS_NOEXEC,
		unix.ST_NOATIME: unix.MS_NOATIME, unix.ST_NODIRATIME: unix.MS_NODIRATIME, unix.ST_RELATIME: unix.MS_RELATIME, unix.ST_RDONLY: unix.MS_RDONLY} {
		if sfs.Flags&st != 0 {
			flags |= ms
		}
	}
	if attr&unix.MOUNT_ATTR_NOSUID != 0 {
		flags |= unix.MS_NOSUID
	}
	if attr&unix.MOUNT_ATTR_NODEV != 0 {
		flags |= unix.MS_NODEV
	}
	if attr&unix.MOUNT_ATTR_RDONLY != 0 {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount("", p, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s: %w", p, err)
	}
	return nil
}

// makeDev builds a minimal /dev: the seal's device nodes (binds of the
// host's), a private devpts instance and the usual symlinks, read-only.
// /dev/shm points at /tmp so POSIX shared memory works without another
// writable area.
func makeDev(dev string, m seal.Mount, sl *seal.Seal, sources map[string]source) error {
	if err := os.Mkdir(dev, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, m.TmpfsOptions()); err != nil {
		return fmt.Errorf("/dev tmpfs: %w", err)
	}
	for _, d := range hostDevices(sl) {
		p := filepath.Join(dev, filepath.Base(d))
		f, err := os.OpenFile(p, os.O_CREATE|os.O_RDONLY, 0o666)
		if err != nil {
			return err
		}
		f.Close()
		if err := unix.Mount(sources[d].path, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", d, err)
		}
		if err := setMountAttr(p, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC); err != nil {
			return err
		}
	}
	pts := filepath.Join(dev, "pts")
	if err := os.Mkdir(pts, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("devpts", pts, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, seal.DevPtsOptions); err != nil {
		return fmt.Errorf("devpts: %w", err)
	}
	for name, target := range seal.DevLinks {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	return unix.Mount("", dev, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "")
}

// maskPaths hides the seal's masked paths (a file behind /dev/null, a
// directory behind an empty read-only tmpfs) and freezes its read-only
// ones, in the root being built at root; paths it does not have are
// skipped.
func maskPaths(root string, sl *seal.Seal) error {
	devNull := filepath.Join(root, "/dev/null")
	for _, q := range sl.ReadOnlyPaths {
		p := filepath.Join(root, q)
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", q, err)
		}
		if err := setMountAttr(p, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC); err != nil {
			return err
		}
	}
	for _, q := range sl.MaskedPaths {
		p := filepath.Join(root, q)
		st, err := os.Lstat(p)
		switch {
		case err != nil:
			continue
		case st.IsDir():
			if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0555"); err != nil {
				return fmt.Errorf("mask %s: %w", q, err)
			}
		default:
			if err := unix.Mount(devNull, p, "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("mask %s: %w", q, err)
			}
			if err := setMountAttr(p, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC); err != nil {
				return err
			}
		}
	}
	return nil
}

// pivot makes root the new "/" and detaches the old one entirely, so no
// path leads back to the host's tree.
func pivot(root string) error {
	if err := unix.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	return unix.Chdir("/")
}

// listenExposed binds the daemon's ports on the sandbox's loopback. Done
// here, before the seal and inside the sandbox's own network namespace, it
// needs no setns from the daemon (which an unprivileged daemon could not do)
// and no network interface.
func listenExposed(ports []uint16) ([]*os.File, error) {
	var out []*os.File
	for _, port := range ports {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			wire.CloseAll(out)
			return nil, fmt.Errorf("exposed port %d: %w", port, err)
		}
		f := os.NewFile(uintptr(fd), fmt.Sprintf("lo:%d", port))
		out = append(out, f)
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(port), Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			wire.CloseAll(out)
			return nil, fmt.Errorf("exposed port %d: bind: %w", port, err)
		}
		if err := unix.Listen(fd, 256); err != nil {
			wire.CloseAll(out)
			return nil, fmt.Errorf("exposed port %d: listen: %w", port, err)
		}
	}
	return out, nil
}

// loopbackUp brings lo up: the only interface a sandbox has.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	return nil
}
