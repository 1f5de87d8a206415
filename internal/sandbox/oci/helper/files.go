package helper

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/beneath"
	"github.com/ironclaw/ironclaw/internal/sandbox/fileio"
	"golang.org/x/sys/unix"
)

// File operations run here, inside the sandbox, with the sandbox's uid and
// view of the filesystem: whatever a path or symlink says, it can only ever
// reach the sandbox's own files. On top of that, resolution stays beneath
// /workspace or /tmp (openat2 RESOLVE_BENEATH). Writes are atomic and only
// regular files are read or written (package fileio).
//
// Protocol: the data travels on stdin (write: the upload framed by
// fileio.NewFramer) or stdout (read: the file's bytes; list: one JSON
// sandbox.FileInfo a line). Success is exit 0. A failure is exit
// FileFailed with one JSON FileError on stderr; code CodeAborted means the
// upload ended before its end mark and the file was left as it was.

// FileFailed is the exit status of a failed file operation.
const FileFailed = 3

// CodeAborted is the FileError code of a write whose upload ended before
// its end mark: nothing was changed.
const CodeAborted = "aborted"

// FileError is how a file operation reports its failure.
type FileError struct {
	Code  string `json:"code"` // not-found, denied, bad-request, io or CodeAborted
	Errno int    `json:"errno,omitempty"`
	Err   string `json:"err"`
}

func (e *FileError) Error() string { return e.Err }

// fileMain: write takes path and octal mode; read and list take a path.
func fileMain(mode string, args []string) int {
	if len(args) < 1 {
		return fileFail(&FileError{Code: CodeBadRequest, Err: "no path"})
	}
	base, rel, err := beneath.Split(args[0])
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
	case errors.Is(err, fileio.ErrIncomplete):
		code = CodeAborted
	case errors.Is(err, fileio.ErrNotRegular):
		code = CodeBadRequest
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

func writeFile(base, rel string, mode uint32) error {
	_, err := fileio.Write(base, rel, fileio.NewUnframer(os.Stdin), mode)
	return err
}

func readFile(base, rel string) error {
	f, _, err := fileio.OpenRegular(base, rel)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(os.Stdout, f)
	return err
}

func listDir(base, rel string) error {
	d, err := beneath.Open(base, rel, unix.O_RDONLY|unix.O_DIRECTORY, 0, false)
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
