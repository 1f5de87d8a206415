package container

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// KillGrace bounds the wait for a killed command's exec to end.
const KillGrace = 10 * time.Second

// CheckExec validates req for a container sandbox of spec on the named
// backend (sandbox.CheckExec) and refuses a terminal, which the helper
// does not offer: sandbox.ErrUnsupported.
func CheckExec(req sandbox.ExecRequest, spec sandbox.Spec, backend string) (sandbox.ExecParams, error) {
	if req.TTY {
		if _, err := sandbox.CheckExec(req, spec.Cwd, spec.Limits); err != nil {
			return sandbox.ExecParams{}, err
		}
		return sandbox.ExecParams{}, fmt.Errorf("%w: the %s backend does not allocate terminals yet (use the native backend for --tty)", sandbox.ErrUnsupported, backend)
	}
	return sandbox.CheckExec(req, spec.Cwd, spec.Limits)
}

// ExecArgv is the helper invocation that runs argv through the exec front:
// nonce marks its header lines (wire.Marker), nproc is the command's
// RLIMIT_NPROC (0: none), cwd its working directory.
func ExecArgv(nonce string, nproc int64, cwd string, argv []string) []string {
	return append([]string{wire.HelperPath, wire.ModeExec, nonce, strconv.FormatInt(nproc, 10), cwd}, argv...)
}

// MarkKilled sets res.Signal to SIGKILL when the command ended the shell's
// way for it (exit 128+9) and the kill is known to be ours or the OOM
// killer's (timeout, cancellation, an OOM kill); runtimes report no signal
// otherwise.
func MarkKilled(res *sandbox.ExecResult, canceled bool) {
	if res.ExitCode == 128+int(syscall.SIGKILL) && (res.TimedOut || canceled || res.OOMKilled) {
		res.Signal = int(syscall.SIGKILL)
	}
}

// Watch is how Wait watches one running exec.
type Watch struct {
	ID        string          // the sandbox's, for errors
	Timeout   time.Duration   // the command's; 0: none
	Exited    <-chan struct{} // closed when the exec (its stream or host process) has ended
	Closed    <-chan struct{} // closed when the sandbox is gone
	KillGroup func(pgid int)  // asks the agent to SIGKILL a process group
	// Abort ends the exec from the host side, the last resort when the
	// agent's kill did not end it or the sandbox is gone; Exited must close
	// soon after.
	Abort func()
}

// Wait waits for the exec to end. On timeout (res.TimedOut is set) or
// ctx's end (returned as ctxErr) the command's process group is killed
// through the agent once its pid is known; a command still starting is
// killed as soon as it reports. err is set when the exec had to be
// aborted: it did not end KillGrace after the kill, or the sandbox went.
func (f *Front) Wait(ctx context.Context, w Watch, res *sandbox.ExecResult) (ctxErr, err error) {
	var killOnce sync.Once
	kill := func() {
		killOnce.Do(func() {
			go func() {
				select {
				case <-f.started:
					if pid := f.pid(); pid > 0 {
						w.KillGroup(pid)
					}
				case <-time.After(KillGrace):
				}
			}()
		})
	}
	deadline, stopDeadline := sandbox.ExecParams{Timeout: w.Timeout}.Deadline()
	defer stopDeadline()
	var killedAt <-chan time.Time
	done := ctx.Done()
	for {
		select {
		case <-w.Exited:
			return ctxErr, nil
		case <-deadline:
			res.TimedOut = true
			kill()
			killedAt = time.After(KillGrace)
		case <-done:
			done = nil
			ctxErr = ctx.Err()
			kill()
			killedAt = time.After(KillGrace)
		case <-killedAt:
			w.Abort()
			<-w.Exited
			return ctxErr, fmt.Errorf("sandbox %s: command did not exit %v after SIGKILL", w.ID, KillGrace)
		case <-w.Closed:
			w.Abort()
			<-w.Exited
			return ctxErr, fmt.Errorf("sandbox %s: %w while the command ran", w.ID, sandbox.ErrClosed)
		}
	}
}

// Stages of a Front.
const (
	stageHeader   = iota // waiting for the front's first header line
	stageChecking        // started; the first bytes could still be a second header (a failed execve)
	stagePass            // the command's own output
	stageOther           // no front spoke: the runtime's (or dockerd's) own complaint, kept
)

// Front receives a command's stderr as it arrives: first the exec front's
// header line, then the command's own output, which goes to out, watching
// its first bytes for a second header (a failed execve). Before the header,
// anything else is the runtime's (or dockerd's) own complaint and is kept
// (bounded), not passed on. Call Finish at the end of the stream.
type Front struct {
	marker string
	out    io.Writer

	mu      sync.Mutex
	stage   int
	pending []byte
	header  *wire.Header  // the last header seen
	other   bytes.Buffer  // output before any header (bounded)
	started chan struct{} // closed at "started" (or when no header can come)
	once    sync.Once

	onStarted func(pid int) // sandbox.ExecRequest.Started; fixed before the first Write
	holds     []*held       // streams held back until started; fixed before the first Write
}

// NewFront reads the stderr of the exec started with nonce; the command's
// own stderr goes to out.
func NewFront(nonce string, out io.Writer) *Front {
	return &Front{marker: wire.Marker(nonce), out: out, started: make(chan struct{})}
}

// OnStarted sets the function called with the command's pid at its
// "started" header, before the front passes on any of its output (and
// before any stream Hold returned does). Call it before the first Write.
func (f *Front) OnStarted(fn func(pid int)) { f.onStarted = fn }

// Hold returns a writer to dst that holds back what is written to it until
// the command has started (its "started" header, and OnStarted's function,
// came first) or no header can come: a command's stdout travels apart
// from the stderr that carries the header, and may arrive first. It never
// fails. Call it before the first Write.
func (f *Front) Hold(dst io.Writer) io.Writer {
	h := &held{dst: dst}
	f.holds = append(f.holds, h)
	return h
}

// open marks the front started, once: the command's pid (0: none, no
// header can come) goes to the OnStarted function, then every held stream
// is let through. It is called without f.mu held.
func (f *Front) open(pid int) {
	f.once.Do(func() {
		if pid > 0 && f.onStarted != nil {
			f.onStarted(pid)
		}
		for _, h := range f.holds {
			h.release()
		}
		close(f.started)
	})
}

// maxHeld bounds what one held stream keeps before the command's start
// is known; past it, output passes (the front writes its header before
// any of the command's output, so only a reordering runtime gets near).
const maxHeld = 1 << 20

// held is one stream Front.Hold holds back.
type held struct {
	mu      sync.Mutex // held across writes to dst, so the order stays
	open    bool
	pending []byte
	dst     io.Writer
}

func (h *held) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.open && len(h.pending)+len(p) <= maxHeld {
		h.pending = append(h.pending, p...)
		return len(p), nil
	}
	h.flush()
	_, _ = h.dst.Write(p)
	return len(p), nil
}

func (h *held) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.flush()
}

// flush passes on what is pending and opens the stream; h.mu is held.
func (h *held) flush() {
	h.open = true
	if len(h.pending) > 0 {
		_, _ = h.dst.Write(h.pending)
		h.pending = nil
	}
}

func (f *Front) pid() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.header != nil && f.header.Started {
		return f.header.Pid
	}
	return 0
}

// Result is the last header the front sent (nil: none, the exec failed
// before the front ran) and what was written before any header.
func (f *Front) Result() (*wire.Header, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.header, f.other.String()
}

// setHeader parses one header line (without marker and newline).
func (f *Front) setHeader(line string) {
	if h, err := wire.ParseHeader(line); err == nil {
		f.header = &h
	} else {
		f.keep([]byte(line))
	}
}

func (f *Front) keep(p []byte) {
	if room := 64<<10 - f.other.Len(); room > 0 {
		f.other.Write(p[:min(len(p), room)])
	}
}

// Write never fails, so the stream is always read to its end.
func (f *Front) Write(p []byte) (int, error) {
	f.mu.Lock()
	f.pending = append(f.pending, p...)
	var pass []byte
	openPid := -1 // >= 0: open the front (with this pid) once unlocked
	marker := []byte(f.marker)
	for more := true; more; {
		more = false
		switch f.stage {
		case stageHeader, stageChecking:
			switch {
			case bytes.HasPrefix(f.pending, marker):
				i := bytes.IndexByte(f.pending, '\n')
				if i < 0 {
					if len(f.pending) > 4096 {
						f.stage, more = stageOther, true
					}
					break
				}
				f.setHeader(string(f.pending[len(marker):i]))
				f.pending = f.pending[i+1:]
				switch {
				case f.header == nil || !f.header.Started:
					f.stage = stageOther
				case f.stage == stageHeader:
					f.stage = stageChecking
				default:
					f.stage = stagePass
				}
				if f.header != nil && f.header.Started {
					openPid = f.header.Pid
				} else if f.stage == stageOther {
					openPid = 0
				}
				more = true
			case bytes.HasPrefix(marker, f.pending):
				// Too short to tell yet.
			case f.stage == stageHeader:
				f.stage, more = stageOther, true
				openPid = 0
			default:
				f.stage, more = stagePass, true
			}
		case stagePass:
			pass, f.pending = f.pending, nil
		case stageOther:
			f.keep(f.pending)
			f.pending = nil
		}
	}
	f.mu.Unlock()
	if openPid >= 0 {
		f.open(openPid)
	}
	if len(pass) > 0 {
		_, _ = f.out.Write(pass)
	}
	return len(p), nil
}

// Finish flushes what is held back at the end of the stream.
func (f *Front) Finish() {
	f.mu.Lock()
	var pass []byte
	switch f.stage {
	case stageChecking, stagePass:
		pass = f.pending
	default:
		f.keep(f.pending)
	}
	f.pending = nil
	f.mu.Unlock()
	f.open(0)
	if len(pass) > 0 {
		_, _ = f.out.Write(pass)
	}
}
