package helper

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"golang.org/x/sys/unix"
)

// File operations run here, inside the sandbox, with the sandbox's uid and
// view of the filesystem: whatever a path or symlink says, it can only ever
// reach the sandbox's own files. On top of that, resolution stays beneath
// /workspace or /tmp (openat2 RESOLVE_BENEATH).
//
// Protocol: the data travels on stdin (write) or stdout (read: the file's
// bytes; list: one JSON sandbox.FileInfo a line). Success is exit 0. A
// failure is exit FileFailed with one JSON FileError on stderr.

// FileFailed is the exit status of a failed file operation.
const FileFailed = 3

// FileError is how a file operation reports its failure.
type FileError struct {
	Code  string `json:"code"` // not-found, denied, bad-request or io
	Errno int    `json:"errno,omitempty"`
	Err   string `json:"err"`
}

func (e *FileError) Error() string { return e.Err }

// fileMain: write takes path and octal mode; read and list take a path.
func fileMain(mode string, args []string) int {
	if len(args) < 1 {
		return fileFail(&FileError{Code: CodeBadRequest, Err: "no path"})
	}
	base, rel, err := splitBase(args[0])
	if err != nil {
		return fileFail(&FileError{Code: CodeBadRequest, Err: err.Error()})
	}
	switch mode {
	case ModeWrite:
		perm := uint64(0o644)
		if len(args) > 1 {
			if perm, err = strconv.ParseUint(args[1], 8, 32); err != nil {
				return fileFail(&FileError{Code: CodeBadRequest, Err: "bad mode " + args[1]})
			}
		}
		err = writeFile(base, rel, uint32(perm&0o777))
	case ModeRead:
		err = readFile(base, rel)
	case ModeList:
		err = listDir(base, rel)
	}
	if err != nil {
		return fileFail(toFileError(args[0], err))
	}
	return 0
}

func fileFail(e *FileError) int {
	_ = json.NewEncoder(os.Stderr).Encode(e)
	return FileFailed
}

func toFileError(p string, err error) *FileError {
	var fe *FileError
	if errors.As(err, &fe) {
		return fe
	}
	var en unix.Errno
	errors.As(err, &en)
	code := "io"
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		code = "not-found"
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM), errors.Is(err, unix.EXDEV), errors.Is(err, unix.ELOOP), errors.Is(err, unix.EROFS):
		code = "denied"
	case errors.Is(err, unix.EISDIR):
		code = CodeBadRequest
	case en == 0:
		code = CodeBadRequest
	}
	return &FileError{Code: code, Errno: int(en), Err: fmt.Sprintf("%s: %v", p, err)}
}

// splitBase returns the writable area p lies in and p relative to it.
func splitBase(p string) (base, rel string, err error) {
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

// openBeneath opens rel beneath base; with create it first makes the
// missing parent directories, each resolved beneath base too.
func openBeneath(base, rel string, flags int, mode uint32, create bool) (*os.File, error) {
	dfd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	if create {
		parts := strings.Split(rel, "/")
		for i := 1; i < len(parts); i++ {
			dir := strings.Join(parts[:i], "/")
			if err := unix.Mkdirat(dfd, dir, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				return nil, err
			}
			// Confirm the component we created or found resolves beneath.
			fd, err := openat2(dfd, dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, err
			}
			unix.Close(fd)
		}
	}
	fd, err := openat2(dfd, rel, flags|unix.O_CLOEXEC, mode)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// openat2 resolves p beneath dfd. Where the kernel (or gVisor, whose 2022
// sentry has no openat2) lacks it, walkBeneath does the same walk in user
// space, refusing every symlink on the way: stricter than RESOLVE_BENEATH,
// which follows symlinks that stay beneath.
func openat2(dfd int, p string, flags int, mode uint32) (int, error) {
	fd, err := unix.Openat2(dfd, p, &unix.OpenHow{Flags: uint64(flags), Mode: uint64(mode), Resolve: resolve})
	if errors.Is(err, unix.ENOSYS) {
		return walkBeneath(dfd, p, flags, mode)
	}
	return fd, err
}

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
		unix.Close(cur)
		if err != nil {
			if errors.Is(err, unix.ENOTDIR) && isSymlink(cur, c) {
				return -1, unix.ELOOP
			}
			return -1, err
		}
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

func writeFile(base, rel string, mode uint32) error {
	if mode == 0 {
		mode = 0o644
	}
	f, err := openBeneath(base, rel, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW, mode, true)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, os.Stdin)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func readFile(base, rel string) error {
	f, err := openBeneath(base, rel, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0, false)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return &FileError{Code: CodeBadRequest, Err: fmt.Sprintf("%s is not a regular file", path.Join(base, rel))}
	}
	_, err = io.Copy(os.Stdout, f)
	return err
}

func listDir(base, rel string) error {
	d, err := openBeneath(base, rel, unix.O_RDONLY|unix.O_DIRECTORY, 0, false)
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	sort.Strings(names)
	enc := json.NewEncoder(os.Stdout)
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(int(d.Fd()), n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // gone meanwhile
		}
		fi := sandbox.FileInfo{Name: n, Size: st.Size, Mode: fs.FileMode(st.Mode & 0o7777),
			ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC()}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			fi.Type = "file"
		case unix.S_IFDIR:
			fi.Type, fi.Mode = "dir", fi.Mode|fs.ModeDir
		case unix.S_IFLNK:
			fi.Type, fi.Mode = "symlink", fi.Mode|fs.ModeSymlink
		default:
			fi.Type = "other"
		}
		if err := enc.Encode(fi); err != nil {
			return err
		}
	}
	return nil
}
