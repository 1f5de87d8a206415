package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/cgroups"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

// Sandbox is one native sandbox. It is safe for concurrent use.
type Sandbox struct {
	id   string
	spec sandbox.Spec
	rt   *Runtime
	proc *initProc
	conn *wire.Conn
	cg   *cgroups.Cgroup

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan reply // request ID -> replies

	done        chan struct{} // closed once the init is gone and reaped
	destroyOnce sync.Once
	destroyErr  error

	diagMu      sync.Mutex
	diag        []string // the first lines of the init's standard error
	diagPart    []byte   // a line not yet ended
	diagLogged  int      // lines of it logged, up to maxLoggedLines
	diagDropped int      // lines of it past maxLoggedLines, not logged

	listeners map[uint16]net.Listener // exposed port -> listener on the sandbox's lo; fixed after Create

	limitsMu sync.Mutex // guards spec.Limits, which UpdateLimits may change while execs run

}

// limits returns the sandbox's current limits.
func (b *Sandbox) limits() sandbox.Limits {
	b.limitsMu.Lock()
	defer b.limitsMu.Unlock()
	return b.spec.Limits
}

// UpdateLimits changes the memory, pids and CPU limits of the running
// sandbox's cgroup and the timeout and output cap of later execs. Zero
// fields keep their value; the tmpfs sizes and open files are fixed at
// create and must be zero here.
func (b *Sandbox) UpdateLimits(ctx context.Context, l sandbox.Limits) error {
	if l.WorkspaceBytes != 0 || l.TmpBytes != 0 || l.OpenFiles != 0 {
		return fmt.Errorf("%w: workspace, tmp and open files cannot change while a sandbox runs", sandbox.ErrInvalidRequest)
	}
	b.limitsMu.Lock()
	defer b.limitsMu.Unlock()
	next := b.spec.Limits.Changed(l)
	if err := next.Validate(); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrInvalidRequest, err)
	}
	if err := next.ValidateTmpfs(b.spec.Workspace == ""); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrInvalidRequest, err)
	}
	if err := sandbox.ClosedErr(b.id, b.done); err != nil {
		return err
	}
	cur := b.spec.Limits
	if next.MemoryBytes != cur.MemoryBytes || next.Pids != cur.Pids || next.CPUs != cur.CPUs {
		if err := b.cg.Update(cgroups.Limits{MemoryBytes: next.MemoryBytes, Pids: next.Pids, CPUs: next.CPUs}); err != nil {
			return err
		}
	}
	b.spec.Limits = next
	return nil
}

// Listener returns the listener on the sandbox's own loopback for an
// exposed port (Spec.Network.ExposedTCP): whatever the daemon serves on it
// is reachable inside at 127.0.0.1:port, and from nowhere else.
func (b *Sandbox) Listener(port uint16) (net.Listener, bool) {
	l, ok := b.listeners[port]
	return l, ok
}

func (b *Sandbox) closeListeners() {
	for _, l := range b.listeners {
		l.Close()
	}
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

type reply struct {
	wire.Reply
	files []*os.File
}

// ID implements sandbox.Sandbox.
func (b *Sandbox) ID() string { return b.id }

// Done implements sandbox.Sandbox.
func (b *Sandbox) Done() <-chan struct{} { return b.done }

// InitPid is the host pid of the sandbox's pid 1 (for tests and setns).
func (b *Sandbox) InitPid() int { return b.proc.pid }

// readReplies routes the init's replies to waiting requests until the init
// hangs up (it died or was killed); then it reaps it.
func (b *Sandbox) readReplies() {
	for {
		var rep wire.Reply
		files, err := b.conn.Recv(&rep)
		if err != nil {
			break
		}
		b.mu.Lock()
		ch, ok := b.pending[rep.ID]
		b.mu.Unlock()
		if !ok {
			wire.CloseAll(files)
			continue
		}
		select {
		case ch <- reply{rep, files}:
		default:
			// A request gets at most a handful of replies; more is a bug
			// in the init, not a reason to block every other request.
			wire.CloseAll(files)
		}
	}
	b.conn.Close()
	b.proc.kill() // pid 1 leaving takes the whole pid namespace with it
	b.proc.wait()
	close(b.done)
}

func (b *Sandbox) register() (uint64, chan reply) {
	ch := make(chan reply, 4)
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	b.pending[id] = ch
	b.mu.Unlock()
	return id, ch
}

func (b *Sandbox) unregister(id uint64) {
	b.mu.Lock()
	delete(b.pending, id)
	b.mu.Unlock()
}

// await returns the next reply for a request.
func (b *Sandbox) await(ctx context.Context, ch chan reply) (reply, error) {
	select {
	case r := <-ch:
		return r, nil
	case <-b.done:
		return reply{}, fmt.Errorf("sandbox %s: %w", b.id, sandbox.ErrClosed)
	case <-ctx.Done():
		return reply{}, ctx.Err()
	}
}

// replyErr maps a failed reply to the error vocabulary.
func replyErr(r reply) error { return wire.FileErr(r.Code, r.Err) }

// Exec implements sandbox.Sandbox.
func (b *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	p, err := b.prepareExec(req)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	return p.run(ctx)
}

// PrepareExec does everything of an exec but its start (the request's
// checks, the OOM count before, the command's pipes handed to the
// sandbox user), so that a caller can do it while the command's audit
// intent is being committed; the command starts at the PreparedExec's
// Run. A PreparedExec is for one goroutine.
func (b *Sandbox) PrepareExec(req sandbox.ExecRequest) (sandbox.PreparedExec, error) {
	return b.prepareExec(req)
}

// preparedExec is an exec that has not started: nothing of it was sent
// to the sandbox yet.
type preparedExec struct {
	b         *Sandbox
	req       sandbox.ExecRequest
	params    sandbox.ExecParams
	wreq      wire.Request
	oom       *cgroups.OOMCounter
	oomBefore int64
	id        uint64
	ch        chan reply
	// stdinW, outR and errR are our ends of the command's pipes, child
	// the command's (nil for a terminal).
	stdinW, outR, errR *os.File
	child              [3]*os.File
	used               bool
	sent               time.Time // when send handed the command over
}

func (b *Sandbox) prepareExec(req sandbox.ExecRequest) (_ *preparedExec, retErr error) {
	params, err := sandbox.CheckExec(req, b.spec.Cwd, b.limits())
	if err != nil {
		return nil, err
	}
	env := seal.BaseEnv
	if req.TTY {
		env = append(append([]string(nil), env...), "TERM=xterm-256color")
	}
	p := &preparedExec{b: b, req: req, params: params,
		wreq: wire.Request{Op: wire.OpExec, Argv: req.Argv, Env: seal.MergeEnv(env, b.spec.Env, req.Env), Dir: params.Cwd,
			TTY: req.TTY, Rows: req.WindowSize.Rows, Cols: req.WindowSize.Cols, Gate: req.Gate}}
	// The OOM-kill counter, held open for this exec's two reads only: an
	// idle sandbox holds no descriptor but its control socket.
	p.oom, _ = b.cg.OpenOOMCounter()
	p.oomBefore = b.oomKills(p.oom)
	p.id, p.ch = b.register()
	p.wreq.ID = p.id
	defer func() {
		if retErr != nil {
			p.Abort()
		}
	}()
	if !req.TTY {
		var err error
		if p.stdinW, p.child[0], err = commandPipe(false); err != nil {
			return nil, hostErr("the command's stdin", err)
		}
		if p.outR, p.child[1], err = commandPipe(true); err != nil {
			return nil, hostErr("the command's stdout", err)
		}
		if p.errR, p.child[2], err = commandPipe(true); err != nil {
			return nil, hostErr("the command's stderr", err)
		}
		// Pipe inodes belong to their creator: hand the command's ends to
		// the sandbox user so /dev/stdout and /proc/self/fd/N reopen.
		for _, f := range p.child {
			_ = unix.Fchown(int(f.Fd()), b.rt.hostUID, b.rt.hostGID)
		}
	}
	return p, nil
}

// Abort implements sandbox.PreparedExec: it releases what the exec held.
// After Run it does nothing.
func (p *preparedExec) Abort() {
	if p.used {
		return
	}
	p.used = true
	p.release()
	wire.CloseAll([]*os.File{p.stdinW, p.outR, p.errR})
}

// release closes what both an abort and the end of a run close.
func (p *preparedExec) release() {
	wire.CloseAll(p.child[:])
	if p.oom != nil {
		p.oom.Close()
	}
	p.b.unregister(p.id)
}

// Run implements sandbox.PreparedExec: it starts the command and waits
// for its end, as Exec does. It runs once; after Abort or a first Run it
// fails.
func (p *preparedExec) Run(ctx context.Context) (sandbox.ExecResult, error) {
	if p.used {
		return sandbox.ExecResult{}, errors.New("native: a prepared exec runs once")
	}
	return p.run(ctx)
}

func (p *preparedExec) run(ctx context.Context) (sandbox.ExecResult, error) {
	if err := p.send(); err != nil {
		return sandbox.ExecResult{}, err
	}
	return p.finish(ctx)
}

// send hands the command to the sandbox's init, which starts it once it
// reads the request: at once in a ready sandbox, as soon as it is sealed
// in one still being built (CreateExec). On error everything the exec
// held is released; else finish must follow, or drop.
func (p *preparedExec) send() error {
	p.used = true
	b := p.b
	if !p.req.TTY {
		err := b.conn.Send(p.wreq, p.child[:]...)
		wire.CloseAll(p.child[:])
		p.child = [3]*os.File{}
		if err != nil {
			p.drop()
			return b.sendErr(err)
		}
	} else if err := b.conn.Send(p.wreq); err != nil {
		p.drop()
		return b.sendErr(err)
	}
	p.sent = time.Now()
	return nil
}

// drop releases a sent exec that will not be waited for (its sandbox
// failed to become ready and is being discarded, the command with it).
func (p *preparedExec) drop() {
	p.release()
	wire.CloseAll([]*os.File{p.stdinW, p.outR, p.errR})
}

// finish waits for a sent command: its start, its output and its end.
func (p *preparedExec) finish(ctx context.Context) (sandbox.ExecResult, error) {
	defer p.release()
	var res sandbox.ExecResult
	b, req, params, oom, oomBefore, id, ch := p.b, p.req, p.params, p.oom, p.oomBefore, p.id, p.ch
	stdinW, outR, errR := p.stdinW, p.outR, p.errR
	start := p.sent

	first, err := b.await(ctx, ch)
	if err != nil {
		// Cancelled before the start was confirmed: the kill is queued
		// behind the exec inside, so the command cannot outlive us.
		b.kill(id)
		wire.CloseAll([]*os.File{stdinW, outR, errR})
		return res, err
	}
	switch first.Op {
	case wire.OpFailed:
		wire.CloseAll([]*os.File{stdinW, outR, errR})
		wire.CloseAll(first.files)
		return startFailure(first)
	case wire.OpStarted:
	default:
		wire.CloseAll([]*os.File{stdinW, outR, errR})
		wire.CloseAll(first.files)
		return res, fmt.Errorf("sandbox %s: protocol error: %q before the command started", b.id, first.Op)
	}
	var master *os.File
	if req.TTY {
		if len(first.files) != 1 {
			wire.CloseAll(first.files)
			return res, fmt.Errorf("sandbox %s: no terminal came back", b.id)
		}
		master = first.files[0]
		defer master.Close()
	}
	if req.Started != nil && first.Pid > 0 {
		// Before the first byte of output is copied and stdin is read.
		req.Started(first.Pid)
	}

	out := sandbox.NewOutputCap(params.OutputBytes)
	var copiers sync.WaitGroup
	var outBytes, errBytes int64 // written by the copiers, read after they finish
	copyOut := func(dst io.Writer, src *os.File, counter *int64) {
		defer copiers.Done()
		w := out.Writer(dst, counter)
		if _, err := io.Copy(w, src); errors.Is(err, os.ErrDeadlineExceeded) {
			sandbox.DrainPipe(src, w)
		}
	}
	copiers.Add(1)
	if req.TTY {
		go copyOut(req.Stdout, master, &outBytes)
		if req.Stdin != nil || req.Resize != nil {
			stop := make(chan struct{})
			defer close(stop)
			go terminalInput(master, req.Stdin, req.Resize, stop)
		}
	} else {
		copiers.Add(1)
		go copyOut(req.Stdout, outR, &outBytes)
		go copyOut(req.Stderr, errR, &errBytes)
		if req.Stdin != nil {
			go func() {
				_, _ = io.Copy(stdinW, req.Stdin)
				stdinW.Close()
			}()
		} else {
			stdinW.Close()
		}
		defer outR.Close()
		defer errR.Close()
		defer stdinW.Close()
	}

	deadline, stopDeadline := params.Deadline()
	defer stopDeadline()
	var status syscall.WaitStatus
	var ctxErr error
	var killedAt <-chan time.Time // backstop: a killed command that never reports
	done := ctx.Done()
wait:
	for {
		select {
		case r := <-ch:
			wire.CloseAll(r.files)
			if r.Op == wire.OpExited {
				status = syscall.WaitStatus(r.Status)
				break wait
			}
		case <-deadline:
			res.TimedOut = true
			b.kill(id)
			killedAt = time.After(killGrace)
		case <-done:
			done = nil
			ctxErr = ctx.Err()
			b.kill(id)
			killedAt = time.After(killGrace)
		case <-killedAt:
			wire.CloseAll([]*os.File{outR, errR})
			return res, fmt.Errorf("sandbox %s: command did not exit %v after SIGKILL", b.id, killGrace)
		case <-b.done:
			wire.CloseAll([]*os.File{outR, errR})
			return res, fmt.Errorf("sandbox %s: %w while the command ran", b.id, sandbox.ErrClosed)
		}
	}
	res.Duration = time.Since(start)
	// The command is gone; its output is in the pipes unless a process it
	// left behind still holds them open. Drain briefly, then stop.
	drainBy := time.Now().Add(drainGrace)
	for _, f := range []*os.File{outR, errR, master} {
		if f != nil {
			_ = f.SetReadDeadline(drainBy)
		}
	}
	copiers.Wait()
	res.StdoutBytes, res.StderrBytes = outBytes, errBytes
	res.Truncated = out.Truncated()
	switch {
	case status.Exited():
		res.ExitCode = status.ExitStatus()
	case status.Signaled():
		res.Signal = int(status.Signal())
		res.ExitCode = 128 + res.Signal
	}
	if b.oomKills(oom) > oomBefore {
		res.OOMKilled = true
	}
	return res, ctxErr
}

// terminalInput copies stdin to a terminal and applies resizes, in one
// goroutine so that they reach the terminal in the order the caller made
// them: a size sent before some input is set before that input is
// written (a shell asked `stty size` right after a resize answers the new
// size). A write the terminal holds back (its input queue full, the
// program not reading) is retried in short slices, so resizes still pass.
func terminalInput(master *os.File, stdin io.Reader, resize <-chan sandbox.WindowSize, stop <-chan struct{}) {
	// Through the descriptor's raw conn, which holds it open for the
	// ioctl: a resize racing the end of the command meets a closed file,
	// never a reused descriptor (Fd would race Close).
	rc, err := master.SyscallConn()
	if err != nil {
		return // an *os.File always has one
	}
	apply := func(ws sandbox.WindowSize) {
		_ = rc.Control(func(fd uintptr) {
			_ = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: ws.Rows, Col: ws.Cols})
		})
	}
	pending := func() {
		for {
			select {
			case ws := <-resize:
				apply(ws)
			default:
				return
			}
		}
	}
	var chunks chan []byte // nil: no input (left, or ended)
	next := make(chan struct{})
	if stdin != nil {
		chunks = make(chan []byte)
		go func() {
			defer close(chunks)
			buf := make([]byte, 32<<10)
			for {
				n, err := stdin.Read(buf)
				if n > 0 {
					select {
					case chunks <- buf[:n]:
					case <-stop:
						return
					}
					select { // the writer is done with buf
					case <-next:
					case <-stop:
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
	writable := true
	for {
		select {
		case ws := <-resize:
			apply(ws)
		case b, ok := <-chunks:
			if !ok {
				chunks = nil
				continue
			}
			for writable && len(b) > 0 {
				pending() // every size set before this input came
				// Off the poller the deadline is refused and the write
				// blocks: resizes then wait for it.
				_ = master.SetWriteDeadline(time.Now().Add(terminalWriteSlice))
				n, err := master.Write(b)
				b = b[n:]
				if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
					writable = false // the terminal is gone: input is read and dropped
				}
			}
			select {
			case next <- struct{}{}:
			case <-stop:
				return
			}
		case <-stop:
			return
		}
	}
}

// terminalWriteSlice bounds how long a resize waits behind input that the
// terminal is not taking.
const terminalWriteSlice = 20 * time.Millisecond

// killGrace bounds the wait for a killed command's exit report.
const killGrace = 10 * time.Second

// drainGrace bounds how long output is read after the command exited.
const drainGrace = 200 * time.Millisecond

func startFailure(r reply) (sandbox.ExecResult, error) { return wire.StartError(r.Code, r.Err) }

func (b *Sandbox) sendErr(err error) error {
	select {
	case <-b.done:
		return fmt.Errorf("sandbox %s: %w", b.id, sandbox.ErrClosed)
	default:
	}
	if strings.Contains(err.Error(), "limit") {
		return fmt.Errorf("%w: %v", sandbox.ErrInvalidRequest, err)
	}
	return err
}

func (b *Sandbox) kill(id uint64) {
	_ = b.conn.Send(wire.Request{Op: wire.OpSignal, ID: id, Signal: int(syscall.SIGKILL)})
}

// oomKills reads the cgroup's OOM-kill count through oom, or, where that
// could not be opened or read, from the file.
func (b *Sandbox) oomKills(oom *cgroups.OOMCounter) int64 {
	if oom != nil {
		if n, err := oom.Read(); err == nil {
			return n
		}
	}
	n, err := b.cg.OOMKills()
	if err != nil {
		return 0
	}
	return n
}

// commandPipe makes a pipe for one of a command's standard streams. Only
// our end is non-blocking and on the runtime's poller; the command's end
// stays blocking, as programs expect of their stdio. os.Pipe would put
// both ends on the poller, and the command's end would be switched back to
// blocking when it is sent: four system calls wasted per stream.
func commandPipe(weRead bool) (ours, theirs *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, err
	}
	o, t := p[1], p[0]
	if weRead {
		o, t = p[0], p[1]
	}
	if err := unix.SetNonblock(o, true); err != nil {
		_ = unix.Close(o)
		_ = unix.Close(t)
		return nil, nil, err
	}
	return os.NewFile(uintptr(o), "pipe"), os.NewFile(uintptr(t), "pipe"), nil
}

// WriteFile implements sandbox.Sandbox. The upload travels framed (package
// fileio) and the init renames it into place only once all of it has
// arrived: if src fails or ctx ends first, the file is left as it was.
func (b *Sandbox) WriteFile(ctx context.Context, p string, src io.Reader, mode fs.FileMode) error {
	if err := sandbox.CheckFilePath(p); err != nil {
		return err
	}
	if src == nil {
		src = strings.NewReader("")
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return hostErr("the file's pipe", err)
	}
	id, ch := b.register()
	defer b.unregister(id)
	err = b.conn.Send(wire.Request{Op: wire.OpWrite, ID: id, Path: p, Mode: uint32(mode.Perm())}, pr)
	pr.Close()
	if err != nil {
		pw.Close()
		return b.sendErr(err)
	}
	copyErr := make(chan error, 1)
	go func() {
		_, err := io.Copy(pw, wire.NewFramer(src))
		pw.Close()
		copyErr <- err
	}()
	r, err := b.await(ctx, ch)
	if err != nil {
		pw.Close() // the upload ends without its end mark: nothing changes
		return err // src may still be read until its pending Read returns
	}
	if r.Op == wire.OpFailed {
		// Writes into the pipe now fail; wait for the copier so the caller
		// gets src back untouched by us.
		pw.Close()
		cerr := <-copyErr
		if r.Code == wire.CodeAborted && cerr != nil {
			return fmt.Errorf("writing %s: %w (the file was left as it was)", p, cerr)
		}
		return replyErr(r)
	}
	if err := <-copyErr; err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	return nil
}

// ReadFile implements sandbox.Sandbox.
func (b *Sandbox) ReadFile(ctx context.Context, p string, dst io.Writer) error {
	if err := sandbox.CheckFilePath(p); err != nil {
		return err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return hostErr("the file's pipe", err)
	}
	defer pr.Close()
	id, ch := b.register()
	defer b.unregister(id)
	err = b.conn.Send(wire.Request{Op: wire.OpRead, ID: id, Path: p}, pw)
	pw.Close()
	if err != nil {
		return b.sendErr(err)
	}
	r, err := b.await(ctx, ch)
	if err != nil {
		return err
	}
	if r.Op == wire.OpFailed {
		return replyErr(r)
	}
	stop := context.AfterFunc(ctx, func() { _ = pr.SetReadDeadline(time.Now()) })
	defer stop()
	if _, err := io.Copy(dst, pr); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("reading %s: %w", p, err)
	}
	r, err = b.await(ctx, ch)
	if err != nil {
		return err
	}
	if r.Op == wire.OpFailed {
		return replyErr(r)
	}
	return nil
}

// ListDir implements sandbox.Sandbox.
func (b *Sandbox) ListDir(ctx context.Context, p string) ([]sandbox.FileInfo, error) {
	if err := sandbox.CheckListPath(p); err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, hostErr("the listing's pipe", err)
	}
	defer pr.Close()
	id, ch := b.register()
	defer b.unregister(id)
	err = b.conn.Send(wire.Request{Op: wire.OpList, ID: id, Path: p}, pw)
	pw.Close()
	if err != nil {
		return nil, b.sendErr(err)
	}
	r, err := b.await(ctx, ch)
	if err != nil {
		return nil, err
	}
	if r.Op == wire.OpFailed {
		return nil, replyErr(r)
	}
	stop := context.AfterFunc(ctx, func() { _ = pr.SetReadDeadline(time.Now()) })
	defer stop()
	var out []sandbox.FileInfo
	dec := json.NewDecoder(pr)
	for {
		var fi sandbox.FileInfo
		if err := dec.Decode(&fi); err == io.EOF {
			break
		} else if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("listing %s: %w", p, err)
		}
		out = append(out, fi)
	}
	if r, err = b.await(ctx, ch); err != nil {
		return nil, err
	}
	if r.Op == wire.OpFailed {
		return nil, replyErr(r)
	}
	return out, nil
}

// Stats implements sandbox.Sandbox.
func (b *Sandbox) Stats(ctx context.Context) (sandbox.Stats, error) {
	st, err := b.cg.Stats()
	if err != nil {
		return sandbox.Stats{}, err
	}
	return sandbox.Stats{MemoryBytes: st.MemoryBytes, MemoryPeakBytes: st.MemoryPeakBytes,
		CPUUsage: st.CPUUsage, Pids: st.Pids, OOMKills: st.OOMKills}, nil
}

// Destroy implements sandbox.Sandbox: pid 1 dies, the kernel kills the rest
// of the pid namespace and drops every mount with the mount namespace, and
// the cgroup goes last.
func (b *Sandbox) Destroy(ctx context.Context) error {
	b.destroyOnce.Do(func() {
		b.closeListeners()
		_ = b.proc.kill()
		// A paused sandbox's tasks take no signal until thawed (cgroup v1's
		// freezer); the kill is pending, so thawing now lets it land.
		_ = b.cg.Thaw()
		b.conn.Close()
		select {
		case <-b.done:
		case <-ctx.Done():
			b.destroyErr = fmt.Errorf("sandbox %s: waiting for the init to exit: %w", b.id, ctx.Err())
			return
		}
		if err := b.cg.Destroy(ctx); err != nil {
			b.destroyErr = fmt.Errorf("sandbox %s: %w", b.id, err)
		}
		b.logDropped()
		b.rt.mu.Lock()
		delete(b.rt.boxes, b.id)
		b.rt.mu.Unlock()
	})
	return b.destroyErr
}
