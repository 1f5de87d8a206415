package boot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ironclaw/ironclaw/internal/sandbox/setup"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

// setUp builds the sandbox from cfg; it runs as root of the new user
// namespace, before the seal. What to do is package setup's plan, the
// one the C init executes too; this is its Go executor.
func setUp(cfg *wire.Config, trees []*os.File) ([]*os.File, error) {
	steps, err := setup.Root(cfg, len(trees))
	if err != nil {
		return nil, err
	}
	x := &executor{cfg: cfg}
	defer x.close()
	for _, f := range trees {
		x.slots = append(x.slots, source{path: fmt.Sprintf("/proc/self/fd/%d", f.Fd()), tree: int(f.Fd())})
	}
	for _, s := range steps {
		if err := x.do(s); err != nil {
			wire.CloseAll(x.listeners)
			return nil, err
		}
	}
	if err := applySeal(cfg); err != nil {
		wire.CloseAll(x.listeners)
		return nil, err
	}
	return x.listeners, nil
}

// executor runs a plan's root steps (setup.Op names what each does).
type executor struct {
	cfg       *wire.Config
	root      string   // where the root is assembled; "" once it is "/"
	slots     []source // the trees, then what OpOpen opened
	opened    []int    // descriptors OpOpen opened, closed once set up
	listeners []*os.File
}

func (x *executor) close() {
	for _, fd := range x.opened {
		unix.Close(fd)
	}
}

// at is p in the root being assembled.
func (x *executor) at(p string) string { return filepath.Join(x.root, p) }

func (x *executor) do(s setup.Step) error {
	switch s.Op {
	case setup.OpUnshareCgroup:
		if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			return fmt.Errorf("cgroup namespace: %w", err)
		}
	case setup.OpPrivate:
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("make / private: %w", err)
		}
	case setup.OpOpen:
		fd, err := unix.Open(s.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", s.Path, err)
		}
		x.opened = append(x.opened, fd)
		x.slots = append(x.slots, source{path: fmt.Sprintf("/proc/self/fd/%d", fd), tree: -1})
	case setup.OpRoot:
		if err := unix.Mount("tmpfs", s.Path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, s.Data); err != nil {
			return fmt.Errorf("root tmpfs: %w", err)
		}
		x.root = s.Path
	case setup.OpMkdir:
		return pathErr(s, os.Mkdir(x.at(s.Path), os.FileMode(s.Mode)))
	case setup.OpMkdirAll:
		return pathErr(s, os.MkdirAll(x.at(s.Path), os.FileMode(s.Mode)))
	case setup.OpWriteFile:
		return pathErr(s, os.WriteFile(x.at(s.Path), []byte(s.Data), os.FileMode(s.Mode)))
	case setup.OpSymlink:
		return pathErr(s, os.Symlink(s.Source, x.at(s.Path)))
	case setup.OpBind:
		if s.Slot < 0 || int(s.Slot) >= len(x.slots) {
			return fmt.Errorf("bind %s: no source %d", s.Path, s.Slot)
		}
		return pathErr(s, bindMount(x.slots[s.Slot], x.at(s.Path), s.Attr))
	case setup.OpMount:
		if err := unix.Mount(s.Source, x.at(s.Path), s.FSType, uintptr(s.Flags), s.Data); err != nil {
			return fmt.Errorf("mount %s on %s: %w", s.FSType, s.Path, err)
		}
	case setup.OpFreeze:
		return freeze(x.at(s.Path), s.Path)
	case setup.OpMask:
		empty := ""
		if s.Source != "" {
			empty = x.at(s.Source)
		}
		return mask(x.at(s.Path), s.Path, x.at("/dev/null"), empty)
	case setup.OpRmdir:
		return pathErr(s, unix.Rmdir(x.at(s.Path)))
	case setup.OpGate:
		return maskGated(x.cfg, x.root)
	case setup.OpPivot:
		if err := pivot(x.root); err != nil {
			return err
		}
		x.root = "/"
	case setup.OpHostname:
		if err := unix.Sethostname([]byte(s.Data)); err != nil {
			return fmt.Errorf("hostname: %w", err)
		}
	case setup.OpLoopback:
		return loopbackUp()
	case setup.OpCPUs:
		return pinCPUs(s.Data)
	case setup.OpOOM:
		oom, err := openOOMAdj(int(int64(s.Flags)))
		if err != nil {
			return err
		}
		initOOM = oom
	case setup.OpListen:
		l, err := listenExposed(uint16(s.Flags))
		if err != nil {
			return err
		}
		x.listeners = append(x.listeners, l)
	default:
		return fmt.Errorf("set-up step %d: not known to the Go init", s.Op)
	}
	return nil
}

// pathErr names the step's path in err.
func pathErr(s setup.Step, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("root %s: %w", s.Path, err)
}

// source is an opened host path: a detached mount tree from the daemon
// (tree >= 0) or an O_PATH descriptor the child opened itself.
type source struct {
	path string // /proc/self/fd/N
	tree int
}

// bindMount binds host path src at dst (creating the mount point) and
// sets attr on it and everything below it.
func bindMount(src source, dst string, attr uint64) error {
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

// freeze makes p (q in the sandbox), where the root has it, read-only,
// nosuid, nodev and noexec.
func freeze(p, q string) error {
	if _, err := os.Lstat(p); err != nil {
		return nil
	}
	if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", q, err)
	}
	return setMountAttr(p, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
}

// mask hides p (q in the sandbox) where the root has it: a directory
// behind a read-only bind of the empty directory empty ("": an empty
// read-only tmpfs), a file behind devNull.
func mask(p, q, devNull, empty string) error {
	st, err := os.Lstat(p)
	switch {
	case err != nil:
		return nil
	case st.IsDir() && empty == "":
		if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0555"); err != nil {
			return fmt.Errorf("mask %s: %w", q, err)
		}
		return nil
	}
	// /dev/null keeps working as the device it is: no nodev on its bind.
	src, attr := devNull, uint64(unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)
	if st.IsDir() {
		src, attr = empty, attr|unix.MOUNT_ATTR_NODEV
	}
	if err := unix.Mount(src, p, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("mask %s: %w", q, err)
	}
	return setMountAttr(p, attr)
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

// listenExposed binds one of the daemon's ports on the sandbox's
// loopback. Done here, before the seal and inside the sandbox's own
// network namespace, it needs no setns from the daemon (which an
// unprivileged daemon could not do) and no network interface.
func listenExposed(port uint16) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("exposed port %d: %w", port, err)
	}
	f := os.NewFile(uintptr(fd), fmt.Sprintf("lo:%d", port))
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(port), Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		f.Close()
		return nil, fmt.Errorf("exposed port %d: bind: %w", port, err)
	}
	if err := unix.Listen(fd, 256); err != nil {
		f.Close()
		return nil, fmt.Errorf("exposed port %d: listen: %w", port, err)
	}
	return f, nil
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
