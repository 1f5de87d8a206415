package boot

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/ironclaw/ironclaw/internal/sandbox/inside/gaterun"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

// gated is pid 1's gate (see package gate): each stub's identity, with the
// real program it covers, opened before the stub did. Set once by
// maskGated during setup, read-only after.
var gated *gaterun.Table

// stubDir is where the stubs are written, in the new root before
// pivot_root, on a tmpfs of their own that is detached once every stub is
// mounted: no path leads to it.
const stubDir = ".ironclaw-gate"

// maskGated mounts the stub of every gated program of cfg over each of its
// paths in the root being assembled at root. It first opens each program's
// real file through the new root and checks it is the file the daemon
// resolved: the init then holds the only way left to the program's bytes.
func maskGated(cfg *wire.Config, root string) error {
	if len(cfg.Gate) == 0 {
		return nil
	}
	dir := filepath.Join(root, stubDir)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("gate: %w", err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,nr_inodes=1024,mode=0755"); err != nil {
		return fmt.Errorf("gate: stub tmpfs: %w", err)
	}
	tab := gaterun.NewTable()
	for i, g := range cfg.Gate {
		if len(g.Keys) == 0 || len(g.Paths) == 0 {
			return fmt.Errorf("gate: program %d has no key or path", i)
		}
		var real *os.File
		for _, p := range g.Paths {
			f, err := os.OpenFile(filepath.Join(root, p), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
			if err != nil {
				return fmt.Errorf("gate: %s: %w", p, err)
			}
			var st unix.Stat_t
			if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Dev != g.Dev || st.Ino != g.Ino {
				f.Close()
				return fmt.Errorf("gate: %s in the new root is not the file the daemon resolved for %s", p, g.Keys[0])
			}
			if real == nil {
				real = f
			} else {
				f.Close()
			}
		}
		stub := filepath.Join(dir, strconv.Itoa(i))
		if err := os.WriteFile(stub, g.Stub, 0o555); err != nil {
			return fmt.Errorf("gate: %w", err)
		}
		for _, p := range g.Paths {
			target := filepath.Join(root, p)
			if err := unix.Mount(stub, target, "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("gate: mask %s: %w", p, err)
			}
			if err := setMountAttr(target, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV); err != nil {
				return fmt.Errorf("gate: mask %s: %w", p, err)
			}
		}
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(root, g.Paths[0]), &st); err != nil {
			return fmt.Errorf("gate: %w", err)
		}
		tab.Add(st.Dev, st.Ino, &gaterun.Real{Keys: g.Keys, File: real})
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("gate: detach the stubs' tmpfs: %w", err)
	}
	if err := os.Remove(dir); err != nil {
		return fmt.Errorf("gate: %w", err)
	}
	gated = tab
	return nil
}

// gateRun prepares an exec the daemon says was approved for the gated
// program req.Gate (see gaterun.Table.Run): prog and env become what to
// exec, and the returned file (the copy of the real program, nil when
// nothing was lifted) must be closed once the command started. An exec
// without req.Gate is left as it is.
func gateRun(prog *string, env *[]string, req *wire.Request) (*os.File, error) {
	if req.Gate == "" || gated.Empty() {
		return nil, nil
	}
	p, e, f, err := gated.Run(req.Argv[0], *prog, req.Dir, req.Gate, *env, false)
	if err != nil || f == nil {
		return nil, err
	}
	*prog, *env = p, e
	return f, nil
}
