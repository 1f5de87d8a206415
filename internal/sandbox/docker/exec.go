package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/oci/helper"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
)

// killGrace bounds the wait for a killed command's stream to end.
const killGrace = 10 * time.Second

// inspectGrace bounds the wait for dockerd to record an exec's exit code
// after its stream ended.
const inspectGrace = 5 * time.Second

// attached is one running exec with its multiplexed stream.
type attached struct {
	id   string
	conn client.HijackedResponse
}

// attach creates and starts an exec of cmd as the sandbox user and
// attaches to its stdout and stderr (and stdin when withStdin). Every exec
// runs with the container's seal: dockerd starts it from the container's
// own process spec (capabilities, no_new_privs, seccomp, rlimits), with
// the user given here.
func (b *Sandbox) attach(ctx context.Context, cmd, env []string, withStdin bool) (*attached, error) {
	ctx = context.WithoutCancel(ctx) // the caller's cancellation is handled by killing, not by dropping the request
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	ex, err := b.rt.cli.ExecCreate(ctx, b.cid, client.ExecCreateOptions{
		User:         user,
		AttachStdin:  withStdin,
		AttachStdout: true,
		AttachStderr: true,
		Env:          env,
		WorkingDir:   "/",
		Cmd:          cmd,
	})
	if err != nil {
		if cerr := b.closedErr(); cerr != nil {
			return nil, cerr
		}
		return nil, fmt.Errorf("sandbox %s: creating the exec: %w", b.id, err)
	}
	res, err := b.rt.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		if cerr := b.closedErr(); cerr != nil {
			return nil, cerr
		}
		return nil, fmt.Errorf("sandbox %s: starting the exec: %w", b.id, err)
	}
	return &attached{id: ex.ID, conn: res.HijackedResponse}, nil
}

// feed copies r to the exec's stdin and then closes it (a half-close
// dockerd passes on as end of file).
func (a *attached) feed(r io.Reader) {
	_, _ = io.Copy(a.conn.Conn, r)
	_ = a.conn.CloseWrite()
}

// exitCode waits for dockerd to record the exec's exit and returns it.
func (b *Sandbox) exitCode(id string) (int, error) {
	deadline := time.Now().Add(inspectGrace)
	for delay := 2 * time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), inspectGrace)
		in, err := b.rt.cli.ExecInspect(ctx, id, client.ExecInspectOptions{})
		cancel()
		if err != nil {
			return -1, fmt.Errorf("sandbox %s: inspecting the exec: %w", b.id, err)
		}
		if !in.Running {
			return in.ExitCode, nil
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("sandbox %s: the exec's stream ended but dockerd still reports it running", b.id)
		}
		time.Sleep(delay)
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
		return res, fmt.Errorf("%w: the %s backend does not allocate terminals yet (use the native backend for --tty)", sandbox.ErrUnsupported, b.rt.name)
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
	oomBefore := b.oomKills()
	// The container's environment (baseEnv) is under these; dockerd
	// replaces or appends by key.
	env := mergeEnv(b.spec.Env, req.Env)
	// nproc: the command's RLIMIT_NPROC. Under runsc that is how the pids
	// limit is enforced (see config.go); elsewhere the container's pids
	// cgroup is, and the front sets none.
	nproc := "0"
	if b.rt.runsc {
		nproc = strconv.FormatInt(b.spec.Limits.Pids, 10)
	}
	a, err := b.attach(ctx, append([]string{helper.Path, helper.ModeExec, nonce, nproc, cwd}, req.Argv...), env, req.Stdin != nil)
	if err != nil {
		return res, err
	}
	start := time.Now()
	defer a.conn.Close()
	if req.Stdin != nil {
		go a.feed(req.Stdin)
	}

	out := &capped{limit: outCap}
	fw := &frontWriter{marker: helper.Marker(nonce), out: out.writer(req.Stderr, &res.StderrBytes), started: make(chan struct{})}
	streamDone := make(chan struct{})
	go func() {
		defer close(streamDone)
		_, _ = stdcopy.StdCopy(out.writer(req.Stdout, &res.StdoutBytes), fw, a.conn.Reader)
		fw.finish()
	}()

	// kill ends the command's process group through the agent once its pid
	// is known; a command still starting is killed as soon as it reports.
	var killOnce sync.Once
	kill := func() {
		killOnce.Do(func() {
			go func() {
				select {
				case <-fw.started:
					if pid := fw.pid(); pid > 0 {
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
wait:
	for {
		select {
		case <-streamDone:
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
			a.conn.Close()
			<-streamDone
			return res, fmt.Errorf("sandbox %s: command did not exit %v after SIGKILL", b.id, killGrace)
		case <-b.done:
			a.conn.Close()
			<-streamDone
			return res, fmt.Errorf("sandbox %s: %w while the command ran", b.id, sandbox.ErrClosed)
		}
	}
	res.Duration = time.Since(start)
	res.Truncated = out.truncated()
	code, ierr := b.exitCode(a.id)
	res.ExitCode = code

	h, runtimeOut := fw.result()
	switch {
	case h != nil && !h.Started:
		// The front could not start the command (before or at execve).
		return startFailure(*h)
	case h == nil:
		if err := b.closedErr(); err != nil {
			return res, err
		}
		if ctxErr != nil {
			return res, ctxErr
		}
		if ierr != nil {
			return res, ierr
		}
		return res, fmt.Errorf("sandbox %s: docker exec failed (exit %d): %s", b.id, res.ExitCode, strings.TrimSpace(runtimeOut))
	}
	if ierr != nil {
		return res, ierr
	}
	if b.oomKills() > oomBefore {
		res.OOMKilled = true
	}
	// dockerd reports a killed process the shell's way (128+N); the signal
	// itself is only known when we sent it, or the OOM killer did.
	if res.ExitCode == 128+int(syscall.SIGKILL) && (res.TimedOut || ctxErr != nil || res.OOMKilled) {
		res.Signal = int(syscall.SIGKILL)
	}
	return res, ctxErr
}

// mergeEnv joins "KEY=VALUE" layers; a later layer's key replaces an
// earlier one's in place.
func mergeEnv(layers ...[]string) []string {
	idx := map[string]int{}
	var out []string
	for _, l := range layers {
		for _, kv := range l {
			k, _, _ := strings.Cut(kv, "=")
			if i, ok := idx[k]; ok {
				out[i] = kv
				continue
			}
			idx[k] = len(out)
			out = append(out, kv)
		}
	}
	return out
}

func startFailure(h helper.Header) (sandbox.ExecResult, error) {
	switch h.Code {
	case helper.CodeNotFound:
		return sandbox.ExecResult{ExitCode: 127}, fmt.Errorf("%w: %s", sandbox.ErrCommandNotFound, h.Text)
	case helper.CodeNotExecutable, helper.CodeBadCwd:
		return sandbox.ExecResult{ExitCode: 126}, fmt.Errorf("%w: %s", sandbox.ErrNotExecutable, h.Text)
	}
	return sandbox.ExecResult{ExitCode: 126}, fmt.Errorf("%w: %s", sandbox.ErrInvalidRequest, h.Text)
}

// Stages of a frontWriter.
const (
	stageHeader   = iota // waiting for the front's first header line
	stageChecking        // started; the first bytes could still be a second header (a failed execve)
	stagePass            // the command's own output
	stageOther           // no front spoke: dockerd's or the runtime's own complaint, kept
)

// frontWriter receives a command's stderr as the demultiplexer writes it:
// first the exec front's header line, then the command's own output, which
// goes to out, watching its first bytes for a second header. Before the
// header, anything else is dockerd's or the runtime's complaint and is
// kept, not passed on.
type frontWriter struct {
	marker string
	out    io.Writer

	mu      sync.Mutex
	stage   int
	pending []byte
	header  *helper.Header // the last header seen
	other   bytes.Buffer   // output before any header (bounded)
	started chan struct{}  // closed at "started" (or when no header can come)
	once    sync.Once
}

func (f *frontWriter) markStarted() { f.once.Do(func() { close(f.started) }) }

func (f *frontWriter) pid() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.header != nil && f.header.Started {
		return f.header.Pid
	}
	return 0
}

func (f *frontWriter) result() (*helper.Header, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.header, f.other.String()
}

// setHeader parses one header line (without marker and newline).
func (f *frontWriter) setHeader(line string) {
	if h, err := helper.ParseHeader(line); err == nil {
		f.header = &h
	} else {
		f.keep([]byte(line))
	}
}

func (f *frontWriter) keep(p []byte) {
	if room := 64<<10 - f.other.Len(); room > 0 {
		f.other.Write(p[:min(len(p), room)])
	}
}

// Write never fails, so the demultiplexer never stops reading.
func (f *frontWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	f.pending = append(f.pending, p...)
	var pass []byte
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
				if f.header != nil && f.header.Started || f.stage == stageOther {
					f.markStarted()
				}
				more = true
			case bytes.HasPrefix(marker, f.pending):
				// Too short to tell yet.
			case f.stage == stageHeader:
				f.stage, more = stageOther, true
				f.markStarted()
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
	if len(pass) > 0 {
		_, _ = f.out.Write(pass)
	}
	return len(p), nil
}

// finish flushes what is held back at the end of the stream.
func (f *frontWriter) finish() {
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
	if len(pass) > 0 {
		_, _ = f.out.Write(pass)
	}
	f.markStarted()
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

// fileOp runs one of the helper's file modes inside the sandbox through
// the exec API, with the same identity and confinement as a command (never
// `docker cp`, which dockerd performs as root).
func (b *Sandbox) fileOp(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if err := b.closedErr(); err != nil {
		return err
	}
	a, err := b.attach(ctx, append([]string{helper.Path}, args...), nil, stdin != nil)
	if err != nil {
		return err
	}
	defer a.conn.Close()
	stop := context.AfterFunc(ctx, func() { a.conn.Close() })
	defer stop()
	if stdin != nil {
		go a.feed(stdin)
	}
	var stderr bytes.Buffer
	if stdout == nil {
		stdout = io.Discard
	}
	_, cerr := stdcopy.StdCopy(stdout, &limitedBuffer{buf: &stderr, max: 64 << 10}, a.conn.Reader)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	code, err := b.exitCode(a.id)
	if err != nil {
		return err
	}
	switch {
	case code == 0 && cerr == nil:
		return nil
	case code == 0:
		return fmt.Errorf("sandbox %s: %s: %w", b.id, args[0], cerr)
	case code == helper.FileFailed:
		var fe helper.FileError
		if json.Unmarshal(stderr.Bytes(), &fe) == nil {
			return fileErr(fe)
		}
	}
	if err := b.closedErr(); err != nil {
		return err
	}
	return fmt.Errorf("sandbox %s: %s: exit %d: %s", b.id, args[0], code, strings.TrimSpace(stderr.String()))
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
