// Package beneath resolves sandbox file paths so that they never leave
// /workspace or /tmp: openat2 with RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS,
// and where the kernel lacks openat2 (or gVisor's 2022 sentry does), a walk
// in user space that refuses every symlink. It is used inside sandboxes by
// every backend's pid 1 (the native init and the OCI/Docker helper), which
// also run as the sandbox user under its confinement: this is the second
// wall for file operations, not the only one.
package beneath

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"golang.org/x/sys/unix"
)

// Split returns the writable area p lies in (/workspace or /tmp) and p
// relative to it; p must be clean and absolute.
func Split(p string) (base, rel string, err error) {
	if !path.IsAbs(p) || path.Clean(p) != p {
		return "", "", fmt.Errorf("path %q must be a clean absolute path", p)
	}
	if p == sandbox.WorkspaceDir || p == sandbox.TmpDir {
		return p, ".", nil
	}
	for _, b := range []string{sandbox.WorkspaceDir, sandbox.TmpDir} {
		if r, ok := strings.CutPrefix(p, b+"/"); ok && r != "" {
			return b, r, nil
		}
	}
	return "", "", fmt.Errorf("path %q is not under %s or %s", p, sandbox.WorkspaceDir, sandbox.TmpDir)
}

const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

// Open opens rel beneath base; with create it first makes the missing
// parent directories, each resolved beneath base too.
func Open(base, rel string, flags int, mode uint32, create bool) (*os.File, error) {
	dfd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	if create {
		parts := strings.Split(rel, "/")
		if err := mkdirs(dfd, parts[:len(parts)-1]); err != nil {
			return nil, err
		}
	}
	fd, err := Openat2(dfd, rel, flags|unix.O_CLOEXEC, mode)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// OpenDir opens the directory rel beneath base (O_RDONLY|O_DIRECTORY);
// with create it first makes every missing directory of rel, each resolved
// beneath base. rel "." is base itself.
func OpenDir(base, rel string, create bool) (*os.File, error) {
	dfd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	if create && rel != "." {
		if err := mkdirs(dfd, strings.Split(rel, "/")); err != nil {
			return nil, err
		}
	}
	fd, err := Openat2(dfd, rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// mkdirs makes each directory parts[:1], parts[:2], ... beneath dfd that is
// missing, confirming every one resolves beneath it.
func mkdirs(dfd int, parts []string) error {
	for i := 1; i <= len(parts); i++ {
		dir := strings.Join(parts[:i], "/")
		if err := unix.Mkdirat(dfd, dir, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
		// Confirm the component we created or found resolves beneath.
		fd, err := Openat2(dfd, dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		unix.Close(fd)
	}
	return nil
}

// Openat2 resolves p beneath dfd. Where the kernel (or gVisor, whose 2022
// sentry has no openat2) lacks it, walkBeneath does the same walk in user
// space, refusing every symlink on the way: stricter than RESOLVE_BENEATH,
// which follows symlinks that stay beneath.
//
// The kernel answers EAGAIN when a ".." step raced with a mount or rename
// anywhere on the host (it cannot then vouch for the walk); openat2(2) says
// to retry, so we do, a bounded number of times.
func Openat2(dfd int, p string, flags int, mode uint32) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags), Mode: uint64(mode), Resolve: resolve}
	for range maxRetries {
		fd, err := unix.Openat2(dfd, p, how)
		switch {
		case errors.Is(err, unix.ENOSYS):
			return walkBeneath(dfd, p, flags, mode)
		case errors.Is(err, unix.EAGAIN):
			continue
		}
		return fd, err
	}
	return -1, unix.EAGAIN
}

// maxRetries bounds Openat2's retries after EAGAIN: enough for a host busy
// mounting, small enough that a stuck walk cannot spin.
const maxRetries = 64

// walkBeneath opens each directory of p with O_NOFOLLOW from the one
// before, then the last component with O_NOFOLLOW. p is clean and
// relative, so it holds no "..".
func walkBeneath(dfd int, p string, flags int, mode uint32) (int, error) {
	parts := strings.Split(p, "/")
	for _, c := range parts {
		if c == ".." || c == "" {
			return -1, unix.EXDEV
		}
	}
	cur, err := unix.Openat(dfd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, c := range parts[:len(parts)-1] {
		next, err := unix.Openat(cur, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			// Ask while cur is still open: a symlink on the way is an
			// escape (ELOOP), not a missing directory.
			if errors.Is(err, unix.ENOTDIR) && isSymlink(cur, c) {
				err = unix.ELOOP
			}
			unix.Close(cur)
			return -1, err
		}
		unix.Close(cur)
		cur = next
	}
	defer unix.Close(cur)
	last := parts[len(parts)-1]
	// gVisor's 2022 sentry follows a final symlink despite O_NOFOLLOW when
	// O_DIRECTORY is set, so look first and compare after.
	var before unix.Stat_t
	switch err := unix.Fstatat(cur, last, &before, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && before.Mode&unix.S_IFMT == unix.S_IFLNK:
		return -1, unix.ELOOP
	case err != nil && !(errors.Is(err, unix.ENOENT) && flags&unix.O_CREAT != 0):
		return -1, err
	}
	fd, err := unix.Openat(cur, last, flags|unix.O_NOFOLLOW, mode)
	if err != nil {
		if flags&unix.O_DIRECTORY != 0 && errors.Is(err, unix.ENOTDIR) && isSymlink(cur, last) {
			return -1, unix.ELOOP
		}
		return -1, err
	}
	var after unix.Stat_t
	if err := unix.Fstat(fd, &after); err != nil || after.Mode&unix.S_IFMT == unix.S_IFLNK ||
		(before.Ino != 0 && (after.Ino != before.Ino || after.Dev != before.Dev)) {
		unix.Close(fd)
		return -1, unix.ELOOP
	}
	return fd, nil
}

func isSymlink(dfd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}
