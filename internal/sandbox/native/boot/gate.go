package boot

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/ironclaw/ironclaw/internal/sandbox/gate"
	"github.com/ironclaw/ironclaw/internal/sandbox/native/wire"
	"golang.org/x/sys/unix"
)

// gated is pid 1's gate (see package gate): each stub's identity, with the
// real program it covers, opened before the stub did. Set once by
// maskGated during setup, read-only after.
var gated *gate.Table

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
	tab := gate.NewTable()
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
		if err := os.WriteFile(stub, gate.Stub(g.Keys[0]), 0o555); err != nil {
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
		tab.Add(st.Dev, st.Ino, &gate.Real{Keys: g.Keys, File: real})
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
// program req.Gate (see gate.Table.Approved). When req.Argv[0] (resolved
// to prog) is that program's stub, prog becomes the copy of the real
// program to exec, env loses the loader's variables, and the returned file
// (that copy) must be closed once the command started. An exec without
// req.Gate, or whose program is not gated, is left as it is.
func gateRun(prog *string, env *[]string, req *wire.Request) (*os.File, error) {
	if req.Gate == "" || gated.Empty() {
		return nil, nil
	}
	r, err := gated.Approved(*prog, req.Dir, req.Gate)
	if err != nil || r == nil {
		return nil, err
	}
	f, err := r.Runnable(req.Gate, false)
	if err != nil {
		return nil, fmt.Errorf("%s: the approved program cannot be prepared: %w", req.Argv[0], err)
	}
	*prog = gate.ExecPath(f)
	*env = gate.SafeEnv(*env)
	return f, nil
}
