package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"unsafe"

	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

// gvisorSetup is the agent's first work on runsc, when its first argument
// is wire.GVisorSetupFlag. It starts holding the capabilities the bundle
// grants it alone (CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_SETPCAP)
// and, before anything else runs, makes the sentry's sandbox look like
// every other backend's, then drops them:
//
//   - /dev: the sentry's devtmpfs also holds /dev/fuse and /dev/net/tun;
//     every device node that is not in seal.DeviceNodes is removed (the
//     sandbox cannot make new ones: seccomp refuses mknod of devices);
//   - /sys/fs/cgroup: the sentry's cgroupfs (runsc --cgroupfs) shows its
//     own default limits, and the tmpfs beneath is world-writable; the
//     agent writes the sandbox's memory and CPU limits into the memory and
//     cpu controllers, adds a pids directory with the pids limit (the
//     sentry's cgroupfs has no pids controller mounted), all root's and
//     read-only to the sandbox user, and makes the tmpfs mode 0755.
//
// These are files inside the sentry, owned by the sentry's root; the
// capabilities reach nothing of the host.
func gvisorSetup(arg string) error {
	memory, pids, quota, period, err := wire.ParseGVisorSetup(arg)
	if err != nil {
		return err
	}
	if os.Getpid() != 1 {
		return errors.New("the gVisor setup runs only as pid 1")
	}
	err = errors.Join(removeExtraDevices(), writeCgroupView(memory, pids, quota, period))
	if derr := dropCapabilities(); derr != nil {
		return errors.Join(err, derr)
	}
	return err
}

// removeExtraDevices removes every device node under /dev that is not in
// seal.DeviceNodes, and the directories that held only those.
func removeExtraDevices() error {
	var errs []error
	var emptied []string
	_ = filepath.WalkDir("/dev", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type()&(fs.ModeDevice|fs.ModeCharDevice) == 0 || slices.Contains(seal.DeviceNodes, p) {
			return nil
		}
		if err := unix.Unlink(p); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", p, err))
			return nil
		}
		if dir := filepath.Dir(p); dir != "/dev" {
			emptied = append(emptied, dir)
		}
		return nil
	})
	for _, d := range emptied {
		_ = unix.Rmdir(d) // only if nothing else is in it
	}
	return errors.Join(errs...)
}

// writeCgroupView writes the sandbox's limits into the sentry's cgroupfs.
func writeCgroupView(memory, pids, quotaUs, periodUs int64) error {
	const cg = "/sys/fs/cgroup"
	write := func(p string, v int64) error {
		return os.WriteFile(p, []byte(strconv.FormatInt(v, 10)), 0)
	}
	var errs []error
	for _, w := range []struct {
		file string
		v    int64
	}{
		{"memory/memory.limit_in_bytes", memory},
		{"cpu/cpu.cfs_period_us", periodUs},
		{"cpu/cpu.cfs_quota_us", quotaUs},
	} {
		if err := write(filepath.Join(cg, w.file), w.v); err != nil {
			errs = append(errs, fmt.Errorf("cgroup view: %w", err))
		}
	}
	d := filepath.Join(cg, "pids")
	if err := os.Mkdir(d, 0o555); err != nil && !errors.Is(err, fs.ErrExist) {
		errs = append(errs, fmt.Errorf("cgroup view: %w", err))
	} else {
		f := filepath.Join(d, "pids.max")
		if err := os.WriteFile(f, []byte(strconv.FormatInt(pids, 10)+"\n"), 0o444); err != nil {
			errs = append(errs, fmt.Errorf("cgroup view: %w", err))
		}
		for _, p := range []string{f, d} {
			if err := os.Lchown(p, 0, 0); err != nil {
				errs = append(errs, fmt.Errorf("cgroup view: %w", err))
			}
		}
		if err := os.Chmod(d, 0o555); err != nil {
			errs = append(errs, fmt.Errorf("cgroup view: %w", err))
		}
	}
	if err := os.Chmod(cg, 0o755); err != nil {
		errs = append(errs, fmt.Errorf("cgroup view: %w", err))
	}
	return errors.Join(errs...)
}

// dropCapabilities empties every capability set of every thread.
func dropCapabilities() error {
	caps, err := capabilities()
	if err != nil {
		return err
	}
	for c := uintptr(0); c < 64; c++ {
		if (caps.effective|caps.permitted)&(1<<c) == 0 {
			continue
		}
		if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0); e != 0 && e != unix.EINVAL {
			return fmt.Errorf("dropping capability %d from the bounding set: %w", c, e)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capset: %w", e)
	}
	return nil
}
