package boot

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/beneath"
	"github.com/ironclaw/ironclaw/internal/sandbox/fileio"
	"github.com/ironclaw/ironclaw/internal/sandbox/native/wire"
	"golang.org/x/sys/unix"
)

// File operations run here, inside the sandbox, with the sandbox's uid,
// landlock domain and view of the filesystem: whatever a path or symlink
// says, it can only ever reach the sandbox's own files. On top of that,
// resolution stays beneath /workspace or /tmp (openat2 RESOLVE_BENEATH).
// Writes are atomic and only regular files are read or written (package
// fileio).

func fileErrCode(err error) string {
	switch {
	case errors.Is(err, fileio.ErrIncomplete):
		return wire.CodeAborted
	case errors.Is(err, fileio.ErrNotRegular):
		return "bad-request"
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return "not-found"
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM), errors.Is(err, unix.EXDEV), errors.Is(err, unix.ELOOP):
		return "denied"
	case errors.Is(err, unix.EISDIR):
		return "bad-request"
	}
	return "io"
}

func (a *agent) fileFail(id uint64, p string, err error) {
	var en syscall.Errno
	errors.As(err, &en)
	code := fileErrCode(err)
	if en == 0 && code == "io" {
		code = "bad-request"
	}
	a.fail(id, code, en, fmt.Errorf("%s: %w", p, err))
}

// writeFile replaces req.Path with the framed upload in the pipe
// files[0] (see fileio): atomically, so a cut-short upload changes nothing.
func (a *agent) writeFile(req wire.Request, files []*os.File) {
	defer wire.CloseAll(files)
	if len(files) != 1 {
		a.fail(req.ID, "bad-request", 0, errors.New("write needs one descriptor"))
		return
	}
	base, rel, err := beneath.Split(req.Path)
	if err != nil {
		a.fail(req.ID, "bad-request", 0, err)
		return
	}
	src := pollable(files[0])
	defer src.Close()
	n, err := fileio.Write(base, rel, fileio.NewUnframer(src), req.Mode&0o777)
	if err != nil {
		a.fileFail(req.ID, req.Path, err)
		return
	}
	_ = a.conn.Send(wire.Reply{Op: wire.OpDone, ID: req.ID, Size: n})
}

// pollable returns the pipe f as a file the Go poller serves: a copy of
// its descriptor in non-blocking mode (f itself stays as it was). A file
// operation then waits for the daemon without holding an OS thread, and
// pid 1's threads count against the sandbox's pids limit. If that fails,
// f is returned as it is (served by a blocked thread).
func pollable(f *os.File) *os.File {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return f
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return f
	}
	return os.NewFile(uintptr(fd), f.Name())
}

// readFile copies req.Path into the pipe in files[0]: first a started reply
// with the size, then the bytes, then done.
func (a *agent) readFile(req wire.Request, files []*os.File) {
	defer wire.CloseAll(files)
	if len(files) != 1 {
		a.fail(req.ID, "bad-request", 0, errors.New("read needs one descriptor"))
		return
	}
	base, rel, err := beneath.Split(req.Path)
	if err != nil {
		a.fail(req.ID, "bad-request", 0, err)
		return
	}
	f, st, err := fileio.OpenRegular(base, rel)
	if err != nil {
		a.fileFail(req.ID, req.Path, err)
		return
	}
	defer f.Close()
	_ = a.conn.Send(wire.Reply{Op: wire.OpStarted, ID: req.ID, Size: st.Size()})
	dst := pollable(files[0])
	n, err := io.Copy(dst, f)
	dst.Close()
	files[0].Close()
	if err != nil {
		a.fileFail(req.ID, req.Path, err)
		return
	}
	_ = a.conn.Send(wire.Reply{Op: wire.OpDone, ID: req.ID, Size: n})
}

// listDir writes the entries of req.Path, one JSON object a line, into the
// pipe in files[0], then replies done.
func (a *agent) listDir(req wire.Request, files []*os.File) {
	defer wire.CloseAll(files)
	if len(files) != 1 {
		a.fail(req.ID, "bad-request", 0, errors.New("list needs one descriptor"))
		return
	}
	base, rel, err := beneath.Split(req.Path)
	if err != nil {
		a.fail(req.ID, "bad-request", 0, err)
		return
	}
	d, err := beneath.Open(base, rel, unix.O_RDONLY|unix.O_DIRECTORY, 0, false)
	if err != nil {
		a.fileFail(req.ID, req.Path, err)
		return
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		a.fileFail(req.ID, req.Path, err)
		return
	}
	sort.Strings(names)
	_ = a.conn.Send(wire.Reply{Op: wire.OpStarted, ID: req.ID, Size: int64(len(names))})
	enc := json.NewEncoder(files[0])
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
			break // the daemon stopped reading
		}
	}
	files[0].Close()
	_ = a.conn.Send(wire.Reply{Op: wire.OpDone, ID: req.ID})
}
