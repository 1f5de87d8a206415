package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// What every backend does with an exec and a file request on the host,
// the same way: validate it, take its effective limits, cap its output.

// ExecParams are an exec request's effective settings.
type ExecParams struct {
	Cwd         string        // absolute
	Timeout     time.Duration // the request's, at most the sandbox's; 0: none (a Background exec without one)
	OutputBytes int64         // the request's, at most the sandbox's; math.MaxInt64 for a Background exec without one
}

// Deadline returns a channel that fires when the exec's wall time is up,
// and its stop function; a nil channel (never fires) when it has none.
func (p ExecParams) Deadline() (<-chan time.Time, func() bool) {
	if p.Timeout <= 0 {
		return nil, func() bool { return false }
	}
	t := time.NewTimer(p.Timeout)
	return t.C, t.Stop
}

// CheckExec validates req for a sandbox whose default working directory
// is cwd and whose limits are lim, and returns its effective settings.
// Errors wrap ErrInvalidRequest.
func CheckExec(req ExecRequest, cwd string, lim Limits) (ExecParams, error) {
	var p ExecParams
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return p, fmt.Errorf("%w: empty command", ErrInvalidRequest)
	}
	for _, a := range req.Argv {
		if strings.ContainsRune(a, 0) {
			return p, fmt.Errorf("%w: argument contains a NUL byte", ErrInvalidRequest)
		}
	}
	for _, kv := range req.Env {
		if err := ValidateEnv(kv); err != nil {
			return p, fmt.Errorf("%w: env: %v", ErrInvalidRequest, err)
		}
	}
	if req.Cwd != "" {
		cwd = req.Cwd
	}
	if !path.IsAbs(cwd) || strings.ContainsRune(cwd, 0) {
		return p, fmt.Errorf("%w: cwd %q must be absolute", ErrInvalidRequest, cwd)
	}
	p.Cwd = cwd
	if req.Background {
		// A long-lived process: only the request's own bounds.
		p.Timeout = max(req.Timeout, 0)
		p.OutputBytes = math.MaxInt64
		if req.OutputBytes > 0 {
			p.OutputBytes = req.OutputBytes
		}
		return p, nil
	}
	p.Timeout = lim.Timeout
	if req.Timeout > 0 && req.Timeout < p.Timeout {
		p.Timeout = req.Timeout
	}
	p.OutputBytes = lim.OutputBytes
	if req.OutputBytes > 0 && req.OutputBytes < p.OutputBytes {
		p.OutputBytes = req.OutputBytes
	}
	return p, nil
}

// CheckFilePath fails unless p is a clean absolute path beneath
// WorkspaceDir or TmpDir (the file API's paths). The error wraps
// ErrInvalidRequest.
func CheckFilePath(p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p {
		return fmt.Errorf("%w: path %q must be a clean absolute path", ErrInvalidRequest, p)
	}
	for _, base := range []string{WorkspaceDir, TmpDir} {
		if strings.HasPrefix(p, base+"/") {
			return nil
		}
	}
	return fmt.Errorf("%w: path %q is not under %s or %s", ErrInvalidRequest, p, WorkspaceDir, TmpDir)
}

// CheckListPath is CheckFilePath for ListDir, which also takes the two
// areas themselves.
func CheckListPath(p string) error {
	if p == WorkspaceDir || p == TmpDir {
		return nil
	}
	return CheckFilePath(p)
}

// OutputCap counts every byte and keeps the first limit across the
// streams it serves (ExecResult.Truncated, ExecRequest.OutputBytes); the
// rest is read and dropped so the command never blocks on it. It is safe
// for concurrent use.
type OutputCap struct {
	mu    sync.Mutex
	limit int64
	kept  int64
	trunc bool
}

// NewOutputCap keeps the first limit bytes of all its writers together.
func NewOutputCap(limit int64) *OutputCap { return &OutputCap{limit: limit} }

// Truncated reports whether any byte was dropped.
func (c *OutputCap) Truncated() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trunc
}

// Writer is one stream: every byte counts in *counter, what fits goes to
// dst (nil: nowhere). It never fails, and a dst that fails is dropped so
// that a reader that went away cannot stall the command.
func (c *OutputCap) Writer(dst io.Writer, counter *int64) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		c.mu.Lock()
		*counter += int64(len(p))
		room := c.limit - c.kept
		keep := p
		if int64(len(keep)) > room {
			keep = keep[:max(room, 0)]
			c.trunc = true
		}
		c.kept += int64(len(keep))
		c.mu.Unlock()
		if dst != nil && len(keep) > 0 {
			if _, err := dst.Write(keep); err != nil {
				dst = nil // a reader that went away must not stall the command
			}
		}
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// DrainPipe copies to w what the pipe f holds right now, without waiting,
// once a read deadline has cut a copy short (at most 1 MiB: a pipe holds
// at most pipe-max-size of what was written before its writer exited, so
// the bound only stops a process that keeps writing). A deadline that
// passed before the copy got to read (a loaded machine) must not cost
// output the command wrote before it exited.
func DrainPipe(f *os.File, w io.Writer) {
	// The poller refuses any read once the deadline has passed, raw ones
	// included; the single-attempt reads below never wait anyway.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, 64<<10)
	for total := 0; total < 1<<20; {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = syscall.Read(int(fd), buf)
			return true // one attempt: never wait
		}); err != nil || rerr != nil || n <= 0 {
			return
		}
		if _, err := w.Write(buf[:n]); err != nil {
			return
		}
		total += n
	}
}

// ProcessOwner returns "<pid>.<starttime>" for a live process: an owner
// record that a recycled pid cannot match. Backends name what they leave
// on the host (cgroups, bundles, containers) after theirs, so that a new
// daemon removes only what dead ones left (OwnerAlive).
func ProcessOwner(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// The command name may hold spaces and parentheses: split after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return "", fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return fmt.Sprintf("%d.%s", pid, f[19]), nil
}

// OwnerAlive reports whether the process an owner record (ProcessOwner)
// names still runs.
func OwnerAlive(owner string) bool {
	pid, _, _ := strings.Cut(owner, ".")
	p, err := strconv.Atoi(pid)
	if err != nil {
		return false
	}
	cur, err := ProcessOwner(p)
	return err == nil && cur == owner
}

// DestroyAll destroys every sandbox of a runtime that is closing, each
// whatever became of the others, and joins what failed.
func DestroyAll[S interface{ Destroy(context.Context) error }](ctx context.Context, boxes []S) error {
	var errs []error
	for _, b := range boxes {
		if err := b.Destroy(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
