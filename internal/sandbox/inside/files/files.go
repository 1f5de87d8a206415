// Package files is how every backend's pid 1 (the native init, the
// container helper) reads, lists and replaces sandbox files for the
// daemon's file API. It runs inside the sandbox, as the sandbox user under
// its confinement: whatever a path or symlink says, it can only ever reach
// the sandbox's own files, and resolution stays beneath /workspace or /tmp
// (package beneath) on top of that.
//
// A write is atomic: the data goes to a temporary file in the target's own
// directory (named wire.UploadTempPrefix...), which is renamed over the
// target only once the whole upload has arrived and been written. An
// upload that is cut short (the client went away, the daemon's copy
// failed, the sandbox's tmpfs filled up) leaves the old file as it was
// and no temporary file behind; it travels framed (wire.NewFramer) so
// that a cut-short stream can be told from a complete one.
//
// Only regular files are read or replaced. A FIFO, socket or device node
// at the path is refused at once, without opening it for writing (which
// would block until a reader came) and with O_NONBLOCK for reading (which
// would block until a writer came); the error wraps ErrNotRegular.
//
// Failure says how a failed operation is reported across the boundary
// (a wire.FileError with one of wire's codes), the same from both pid 1s.
package files

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"

	"github.com/ironclaw/ironclaw/internal/sandbox/inside/beneath"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

// ErrNotRegular: the path names a directory, FIFO, socket or device, not a
// regular file.
var ErrNotRegular = errors.New("not a regular file")

// kindOf names a file type for an error message.
func kindOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFLNK:
		return "a symbolic link"
	}
	return "not a regular file"
}

// notRegular is the error for p of the given mode: EISDIR for directories,
// ELOOP for symlinks (as O_NOFOLLOW reports them), else ErrNotRegular.
func notRegular(p string, mode uint32) error {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return fmt.Errorf("%s is a directory: %w", p, unix.EISDIR)
	case unix.S_IFLNK:
		return fmt.Errorf("%s is a symbolic link: %w", p, unix.ELOOP)
	}
	return fmt.Errorf("%s is %s: %w (only regular files can be read or written)", p, kindOf(mode), ErrNotRegular)
}

// OpenRegular opens the regular file rel beneath base for reading. It
// never blocks on a FIFO: the type is checked first, and the open itself
// is O_NONBLOCK and checked again (something may have replaced the file
// in between).
func OpenRegular(base, rel string) (*os.File, os.FileInfo, error) {
	p := path.Join(base, rel)
	if dir, name := path.Split(rel); name != "" {
		d, err := beneath.OpenDir(base, path.Clean("./"+dir), false)
		if err != nil {
			return nil, nil, err
		}
		var st unix.Stat_t
		err = unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
		d.Close()
		if err != nil {
			return nil, nil, err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return nil, nil, notRegular(p, st.Mode)
		}
	}
	f, err := beneath.Open(base, rel, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0, false)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		var sys unix.Stat_t
		_ = unix.Fstat(int(f.Fd()), &sys)
		return nil, nil, notRegular(p, sys.Mode)
	}
	return f, st, nil
}

// Write replaces (or creates) rel beneath base with what src yields, with
// permission bits mode (0 means 0644; the process umask applies), making
// missing parent directories. It is atomic (see the package
// documentation): on any error, an incomplete upload included (src
// returning wire.ErrIncomplete), the target is unchanged and the temporary file
// is gone. It returns the bytes written.
func Write(base, rel string, src io.Reader, mode uint32) (int64, error) {
	if mode&0o777 == 0 {
		mode = 0o644
	}
	dirRel, name := path.Split(rel)
	dirRel = path.Clean("./" + dirRel)
	p := path.Join(base, rel)
	if name == "" || name == "." || name == ".." {
		return 0, fmt.Errorf("%s: not a file name: %w", p, unix.EINVAL)
	}
	d, err := beneath.OpenDir(base, dirRel, true)
	if err != nil {
		return 0, err
	}
	defer d.Close()
	dfd := int(d.Fd())
	var st unix.Stat_t
	switch err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG:
		return 0, notRegular(p, st.Mode)
	case err != nil && !errors.Is(err, unix.ENOENT):
		return 0, err
	}
	tmp, f, err := createTemp(dfd, mode&0o777)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, src)
	if err == nil && needsSync(dfd) {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return 0, err
	}
	return n, nil
}

// createTemp makes a new, empty temporary file in the directory dfd.
func createTemp(dfd int, mode uint32) (string, *os.File, error) {
	for range 8 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		name := wire.UploadTempPrefix + hex.EncodeToString(b[:])
		fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return "", nil, err
		}
		return name, os.NewFile(uintptr(fd), name), nil
	}
	return "", nil, unix.EEXIST
}

// needsSync: data on a tmpfs (the sandbox's own areas) is gone with the
// sandbox anyway; on a host directory (Spec.Workspace) a write is synced
// before the rename makes it the file, so a host crash never leaves a
// renamed but empty file.
func needsSync(dfd int) bool {
	var sfs unix.Statfs_t
	return unix.Fstatfs(dfd, &sfs) != nil || sfs.Type != unix.TMPFS_MAGIC
}
