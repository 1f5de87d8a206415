package boot

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/ironclaw/ironclaw/internal/sandbox/inside/files"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

// File operations run here, inside the sandbox, with the sandbox's uid,
// landlock domain and view of the filesystem (package files). Each gets
// one pipe end from the daemon beside its request.

func (a *agent) fileFail(id uint64, p string, err error) {
	fe := files.Failure(p, err)
	a.fail(id, fe.Code, syscall.Errno(fe.Errno), errors.New(fe.Err))
}

// onePipe checks that a file request came with exactly its pipe.
func (a *agent) onePipe(req wire.Request, fds []*os.File) bool {
	if len(fds) != 1 {
		a.fail(req.ID, wire.CodeBadRequest, 0, fmt.Errorf("%s needs one descriptor", req.Op))
		return false
	}
	return true
}

// writeFile replaces req.Path with the framed upload in the pipe
// fds[0]: atomically, so a cut-short upload changes nothing.
func (a *agent) writeFile(req wire.Request, fds []*os.File) {
	defer wire.CloseAll(fds)
	if !a.onePipe(req, fds) {
		return
	}
	src := pollable(fds[0])
	defer src.Close()
	n, err := files.Upload(req.Path, src, req.Mode)
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

// readFile copies req.Path into the pipe in fds[0]: first a started reply
// with the size, then the bytes, then done.
func (a *agent) readFile(req wire.Request, fds []*os.File) {
	defer wire.CloseAll(fds)
	if !a.onePipe(req, fds) {
		return
	}
	f, st, err := files.Open(req.Path)
	if err != nil {
		a.fileFail(req.ID, req.Path, err)
		return
	}
	defer f.Close()
	_ = a.conn.Send(wire.Reply{Op: wire.OpStarted, ID: req.ID, Size: st.Size()})
	dst := pollable(fds[0])
	n, err := io.Copy(dst, f)
	dst.Close()
	fds[0].Close()
	if err != nil {
		a.fileFail(req.ID, req.Path, err)
		return
	}
	_ = a.conn.Send(wire.Reply{Op: wire.OpDone, ID: req.ID, Size: n})
}

// listDir writes the entries of req.Path, one JSON object a line, into the
// pipe in fds[0], then replies done.
func (a *agent) listDir(req wire.Request, fds []*os.File) {
	defer wire.CloseAll(fds)
	if !a.onePipe(req, fds) {
		return
	}
	l, err := files.List(req.Path)
	if err != nil {
		a.fileFail(req.ID, req.Path, err)
		return
	}
	defer l.Close()
	_ = a.conn.Send(wire.Reply{Op: wire.OpStarted, ID: req.ID, Size: int64(len(l.Names))})
	_ = l.Encode(fds[0]) // an error: the daemon stopped reading
	fds[0].Close()
	_ = a.conn.Send(wire.Reply{Op: wire.OpDone, ID: req.ID})
}
