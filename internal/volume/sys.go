package volume

import (
	"path/filepath"

	"golang.org/x/sys/unix"
)

// isMountPoint reports whether dir is the root of a mount (its device
// differs from its parent's): a volume's filesystem already mounted by an
// earlier run.
func isMountPoint(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(dir, &st) != nil || unix.Lstat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// freeBytes is what an unprivileged writer could still write under dir.
func freeBytes(dir string) (int64, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return 0, err
	}
	return int64(fs.Bavail) * fs.Bsize, nil
}

// allocatedBytes is what a volume's sparse file takes on the disk now.
func allocatedBytes(path string) int64 {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return 0
	}
	return st.Blocks * 512
}
