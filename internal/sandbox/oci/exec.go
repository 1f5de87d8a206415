package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/oci/helper"
)

// killGrace bounds the wait for a killed command's runtime exec to return.
const killGrace = 10 * time.Second

// drainGrace bounds how long output is read after the command exited: a
// process it left behind may hold the pipes open.
const drainGrace = 200 * time.Millisecond

// execArgs are the runtime's arguments to run process file p in the
// container. All three runtimes take a full process.json, so every exec
// carries the same seal as the agent (user, capabilities, no_new_privs,
// rlimits) instead of inheriting defaults.
func (b *Sandbox) execArgs(p string) []string {
	return []string{"exec", "--process", p, b.id}
}

// newProcessFile writes a process.json into the bundle's exec directory
// and returns its path; the caller removes it.
func (b *Sandbox) newProcessFile(args, env []string) (string, error) {
	p := filepath.Join(b.b.execDir(), randHex(8)+".json")
	if err := writeProcess(p, sealedProcess(args, env, "/", b.spec.Limits)); err != nil {
		return "", err
	}
	return p, nil
}

// nproc is the RLIMIT_NPROC the exec front gives a command: on runsc the
// Spec's pids limit is enforced inside the sentry this way (see
// runscHostPidsOverhead); on runc and crun the pids cgroup does it (0).
//
// The command gets it, soft and hard, from its first instruction through
// the helper's limit trampoline (helper.ModeLimit), which the front forks
// and which execve's the command. Neither the agent nor the front may
// have it: they are Go programs, fatally hurt by a refused thread, and
// runsc (2022-12) gives every exec'd process the very rlimit set of the
// container's process, ignoring process.json's, so a limit on the agent
// or a setrlimit in a front would bind them all.
func (b *Sandbox) nproc() int64 {
	if b.rt.opts.Runtime == Runsc {
		return b.spec.Limits.Pids
	}
	return 0
}

func (b *Sandbox) closedErr() error {
	select {
	case <-b.done:
		return fmt.Errorf("sandbox %s: %w", b.id, sandbox.ErrClosed)
	default:
		return nil
	}
}

// Exec implements sandbox.Sandbox. The command starts through the helper's
// exec front (see helper.Marker), which gives it a session of its own and
// reports its pid or why it could not start; on timeout or cancellation the
// agent kills its process group.
func (b *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	var res sandbox.ExecResult
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return res, fmt.Errorf("%w: empty command", sandbox.ErrInvalidRequest)
	}
	for _, a := range req.Argv {
		if strings.ContainsRune(a, 0) {
			return res, fmt.Errorf("%w: argument contains a NUL byte", sandbox.ErrInvalidRequest)
		}
	}
	for _, kv := range req.Env {
		if err := sandbox.ValidateEnv(kv); err != nil {
			return res, fmt.Errorf("%w: env: %v", sandbox.ErrInvalidRequest, err)
		}
	}
	if req.TTY {
		return res, fmt.Errorf("%w: the %s backend does not allocate terminals yet (use the native backend for --tty)", sandbox.ErrUnsupported, b.rt.opts.Runtime)
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = b.spec.Cwd
	}
	if !path.IsAbs(cwd) || strings.ContainsRune(cwd, 0) {
		return res, fmt.Errorf("%w: cwd %q must be absolute", sandbox.ErrInvalidRequest, cwd)
	}
	if err := b.closedErr(); err != nil {
		return res, err
	}
	lim := b.spec.Limits
	timeout := lim.Timeout
	if req.Timeout > 0 && req.Timeout < timeout {
		timeout = req.Timeout
	}
	outCap := lim.OutputBytes
	if req.OutputBytes > 0 && req.OutputBytes < outCap {
		outCap = req.OutputBytes
	}

	nonce := randHex(8)
	pfile, err := b.newProcessFile(append([]string{helper.Path, helper.ModeExec, nonce, strconv.FormatInt(b.nproc(), 10), cwd}, req.Argv...),
		mergeEnv(baseEnv, b.spec.Env, req.Env))
	if err != nil {
		return res, err
	}
	defer os.Remove(pfile)

	outR, outW, err := os.Pipe()
	if err != nil {
		return res, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return res, err
	}
	var stdinR, stdinW *os.File
	if req.Stdin != nil {
		if stdinR, stdinW, err = os.Pipe(); err != nil {
			closeAll(outR, outW, errR, errW)
			return res, err
		}
	}
	oomBefore := b.oomCount()
	cmd := b.rt.command(b.execArgs(pfile)...)
	cmd.Stdout, cmd.Stderr = outW, errW
	if stdinR != nil {
		cmd.Stdin = stdinR
	}
	err = cmd.Start()
	closeAll(outW, errW, stdinR)
	if err != nil {
		closeAll(outR, errR, stdinW)
		return res, fmt.Errorf("starting %s exec: %w", b.rt.opts.Runtime, err)
	}
	start := time.Now()
	defer closeAll(outR, errR)
	if stdinW != nil {
		go func() {
			_, _ = io.Copy(stdinW, req.Stdin)
			stdinW.Close()
		}()
		defer stdinW.Close()
	}

	out := &capped{limit: outCap}
	fr := &frontReader{marker: helper.Marker(nonce), out: out.writer(req.Stderr, &res.StderrBytes), started: make(chan struct{})}
	var copiers sync.WaitGroup
	copiers.Add(2)
	go func() {
		defer copiers.Done()
		w := out.writer(req.Stdout, &res.StdoutBytes)
		if _, err := io.Copy(w, outR); errors.Is(err, os.ErrDeadlineExceeded) {
			drainNow(outR, w)
		}
	}()
	go func() {
		defer copiers.Done()
		fr.run(errR)
	}()
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()

	// kill ends the command's process group through the agent once its pid
	// is known; a command still starting is killed as soon as it reports.
	var killOnce sync.Once
	kill := func() {
		killOnce.Do(func() {
			go func() {
				select {
				case <-fr.started:
					if pid := fr.pid(); pid > 0 {
						b.killGroup(pid)
					}
				case <-time.After(killGrace):
				}
			}()
		})
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var ctxErr error
	var killedAt <-chan time.Time
	done := ctx.Done()
	var werr error
wait:
	for {
		select {
		case werr = <-waitErr:
			break wait
		case <-timer.C:
			res.TimedOut = true
			kill()
			killedAt = time.After(killGrace)
		case <-done:
			done = nil
			ctxErr = ctx.Err()
			kill()
			killedAt = time.After(killGrace)
		case <-killedAt:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-waitErr
			return res, fmt.Errorf("sandbox %s: command did not exit %v after SIGKILL", b.id, killGrace)
		case <-b.done:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-waitErr
			return res, fmt.Errorf("sandbox %s: %w while the command ran", b.id, sandbox.ErrClosed)
		}
	}
	res.Duration = time.Since(start)
	drainBy := time.Now().Add(drainGrace)
	_ = outR.SetReadDeadline(drainBy)
	_ = errR.SetReadDeadline(drainBy)
	copiers.Wait()
	res.Truncated = out.truncated()
	res.ExitCode = exitCode(cmd.ProcessState, werr)

	h, runtimeOut := fr.result()
	switch {
	case h != nil && !h.Started:
		// The front could not start the command (before or at execve).
		return startFailure(*h)
	case !fr.sawStart():
		if err := b.closedErr(); err != nil {
			return res, err
		}
		if ctxErr != nil {
			return res, ctxErr
		}
		return res, fmt.Errorf("sandbox %s: %s exec failed (exit %d): %s", b.id, b.rt.opts.Runtime, res.ExitCode, strings.TrimSpace(runtimeOut))
	}
	if b.oomCount() > oomBefore {
		res.OOMKilled = true
	}
	// OCI runtimes report a killed process the shell's way (128+N); the
	// signal itself is only known when we sent it, or the OOM killer did.
	if res.ExitCode == 128+int(syscall.SIGKILL) && (res.TimedOut || ctxErr != nil || res.OOMKilled) {
		res.Signal = int(syscall.SIGKILL)
	}
	return res, ctxErr
}

// exitCode maps the runtime exec's own status to the command's.
func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		return 126
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func startFailure(h helper.Header) (sandbox.ExecResult, error) {
	switch h.Code {
	case helper.CodeNotFound:
		return sandbox.ExecResult{ExitCode: 127}, fmt.Errorf("%w: %s", sandbox.ErrCommandNotFound, h.Text)
	case helper.CodeNotExecutable, helper.CodeBadCwd:
		return sandbox.ExecResult{ExitCode: 126}, fmt.Errorf("%w: %s", sandbox.ErrNotExecutable, h.Text)
	case helper.CodeNoResources:
		// Not the request's fault: the sandbox is at a limit (pids, memory)
		// for now.
		return sandbox.ExecResult{ExitCode: 126}, fmt.Errorf("the command could not start: %s", h.Text)
	}
	return sandbox.ExecResult{ExitCode: 126}, fmt.Errorf("%w: %s", sandbox.ErrInvalidRequest, h.Text)
}

// frontReader reads a command's stderr: first the exec front's header
// line, then the command's own output, which goes to out, watching its
// first bytes for a second header (a failed execve). Before the header,
// anything else is the runtime's own complaint and is kept, not passed on.
type frontReader struct {
	marker string
	out    writerFunc

	mu      sync.Mutex
	header  *helper.Header // the last header seen
	started chan struct{}  // closed at "started" (or when no header can come)
	runtime bytes.Buffer   // runtime output before any header
	once    sync.Once
}

func (f *frontReader) markStarted() { f.once.Do(func() { close(f.started) }) }

func (f *frontReader) pid() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.header != nil && f.header.Started {
		return f.header.Pid
	}
	return 0
}

func (f *frontReader) sawStart() bool { return f.pid() > 0 || f.failed() }

func (f *frontReader) failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.header != nil && !f.header.Started
}

func (f *frontReader) result() (*helper.Header, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.header, f.runtime.String()
}

func (f *frontReader) setHeader(line string) {
	h, err := helper.ParseHeader(line)
	f.mu.Lock()
	if err == nil {
		f.header = &h
	} else {
		f.runtime.WriteString(line)
	}
	f.mu.Unlock()
}

// run reads src to its end (or read deadline).
func (f *frontReader) run(src *os.File) {
	defer f.markStarted()
	buf := make([]byte, 32<<10)
	var pending []byte
	// Stage 1: the header line.
	for {
		if i := bytes.IndexByte(pending, '\n'); i >= 0 && bytes.HasPrefix(pending, []byte(f.marker)) {
			f.setHeader(string(pending[len(f.marker):i]))
			pending = pending[i+1:]
			break
		}
		if len(pending) >= len(f.marker) && !bytes.HasPrefix(pending, []byte(f.marker)) || len(pending) > 4096 {
			// Not the front: the runtime failed before it ran.
			f.keepRuntime(pending, src, buf)
			return
		}
		n, err := src.Read(buf)
		pending = append(pending, buf[:n]...)
		if err != nil {
			f.keepRuntime(pending, nil, nil)
			return
		}
	}
	if !f.sawStart() || f.failed() {
		f.keepRuntime(pending, src, buf)
		return
	}
	f.markStarted()
	// Stage 2: the command's output, held back only while it could still
	// be the front's second header (it starts with a NUL byte, which
	// ordinary output rarely does).
	checking := true
	for {
		if checking {
			switch {
			case len(pending) >= len(f.marker) && bytes.HasPrefix(pending, []byte(f.marker)):
				if i := bytes.IndexByte(pending, '\n'); i >= 0 {
					f.setHeader(string(pending[len(f.marker):i]))
					pending = pending[i+1:]
					checking = false
				}
			case !bytes.HasPrefix([]byte(f.marker), pending):
				checking = false
			}
			if !checking && len(pending) > 0 {
				_, _ = f.out(pending)
				pending = nil
			}
		} else if len(pending) > 0 {
			_, _ = f.out(pending)
			pending = nil
		}
		n, err := src.Read(buf)
		pending = append(pending, buf[:n]...)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				var rest bytes.Buffer
				drainNow(src, &rest)
				pending = append(pending, rest.Bytes()...)
			}
			if len(pending) > 0 {
				_, _ = f.out(pending)
			}
			return
		}
	}
}

// keepRuntime records what the runtime wrote (bounded) and drains src.
func (f *frontReader) keepRuntime(pending []byte, src *os.File, buf []byte) {
	f.mu.Lock()
	f.runtime.Write(pending)
	f.mu.Unlock()
	if src == nil {
		return
	}
	for {
		n, err := src.Read(buf)
		f.mu.Lock()
		if f.runtime.Len() < 64<<10 {
			f.runtime.Write(buf[:n])
		}
		f.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// drainNow reads what a pipe holds right now, without waiting (at most
// 1 MiB: only a process that keeps writing could hold more).
func drainNow(f *os.File, w io.Writer) {
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
		_, _ = w.Write(buf[:n])
		total += n
	}
}

// capped counts every byte and keeps the first limit across the streams it
// serves; the rest is read and dropped so the command never blocks on it.
type capped struct {
	mu    sync.Mutex
	limit int64
	kept  int64
	trunc bool
}

func (c *capped) truncated() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trunc
}

func (c *capped) writer(dst io.Writer, counter *int64) writerFunc {
	return func(p []byte) (int, error) {
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
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// fileOp runs the helper's file mode inside the sandbox, with the same
// identity and confinement as a command.
func (b *Sandbox) fileOp(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if err := b.closedErr(); err != nil {
		return err
	}
	pfile, err := b.newProcessFile(append([]string{helper.Path}, args...), agentEnv)
	if err != nil {
		return err
	}
	defer os.Remove(pfile)
	cmd := b.rt.command(b.execArgs(pfile)...)
	var stdinW *os.File
	if stdin != nil {
		var stdinR *os.File
		if stdinR, stdinW, err = os.Pipe(); err != nil {
			return err
		}
		cmd.Stdin = stdinR
		defer stdinR.Close()
	}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = stdout, &limitedBuffer{buf: &stderr, max: 64 << 10}
	if err := cmd.Start(); err != nil {
		closeAll(stdinW)
		return fmt.Errorf("starting %s exec: %w", b.rt.opts.Runtime, err)
	}
	copyErr := make(chan error, 1)
	if stdinW != nil {
		go func() {
			_, err := io.Copy(stdinW, stdin)
			stdinW.Close()
			copyErr <- err
		}()
	} else {
		copyErr <- nil
	}
	stop := context.AfterFunc(ctx, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	werr := cmd.Wait()
	stop()
	if stdinW != nil {
		stdinW.Close()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if werr == nil {
		if err := <-copyErr; err != nil {
			return fmt.Errorf("writing %s: %w", args[1], err)
		}
		return nil
	}
	var ee *exec.ExitError
	if errors.As(werr, &ee) && ee.ExitCode() == helper.FileFailed {
		var fe helper.FileError
		if json.Unmarshal(stderr.Bytes(), &fe) == nil {
			return fileErr(fe)
		}
	}
	if err := b.closedErr(); err != nil {
		return err
	}
	return fmt.Errorf("sandbox %s: %s: %v: %s", b.id, args[0], werr, strings.TrimSpace(stderr.String()))
}

func fileErr(fe helper.FileError) error {
	var base error
	switch fe.Code {
	case "not-found":
		base = sandbox.ErrNotFound
	case "denied":
		base = sandbox.ErrPermission
	default:
		base = sandbox.ErrInvalidRequest
	}
	return fmt.Errorf("%w: %s", base, fe.Err)
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	buf *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func checkFilePath(p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p {
		return fmt.Errorf("%w: path %q must be a clean absolute path", sandbox.ErrInvalidRequest, p)
	}
	for _, base := range []string{sandbox.WorkspaceDir, sandbox.TmpDir} {
		if strings.HasPrefix(p, base+"/") {
			return nil
		}
	}
	return fmt.Errorf("%w: path %q is not under %s or %s", sandbox.ErrInvalidRequest, p, sandbox.WorkspaceDir, sandbox.TmpDir)
}

// WriteFile implements sandbox.Sandbox.
func (b *Sandbox) WriteFile(ctx context.Context, p string, src io.Reader, mode fs.FileMode) error {
	if err := checkFilePath(p); err != nil {
		return err
	}
	if src == nil {
		src = bytes.NewReader(nil)
	}
	return b.fileOp(ctx, []string{helper.ModeWrite, p, strconv.FormatUint(uint64(mode.Perm()), 8)}, src, nil)
}

// ReadFile implements sandbox.Sandbox.
func (b *Sandbox) ReadFile(ctx context.Context, p string, dst io.Writer) error {
	if err := checkFilePath(p); err != nil {
		return err
	}
	if dst == nil {
		dst = io.Discard
	}
	return b.fileOp(ctx, []string{helper.ModeRead, p}, nil, dst)
}

// ListDir implements sandbox.Sandbox.
func (b *Sandbox) ListDir(ctx context.Context, p string) ([]sandbox.FileInfo, error) {
	if p != sandbox.WorkspaceDir && p != sandbox.TmpDir {
		if err := checkFilePath(p); err != nil {
			return nil, err
		}
	}
	var out bytes.Buffer
	if err := b.fileOp(ctx, []string{helper.ModeList, p}, nil, &out); err != nil {
		return nil, err
	}
	var list []sandbox.FileInfo
	dec := json.NewDecoder(&out)
	for {
		var fi sandbox.FileInfo
		if err := dec.Decode(&fi); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("listing %s: %w", p, err)
		}
		list = append(list, fi)
	}
	return list, nil
}
