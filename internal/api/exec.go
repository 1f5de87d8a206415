package api

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/session"
)

func isStartFailure(err error) bool {
	return errors.Is(err, sandbox.ErrCommandNotFound) || errors.Is(err, sandbox.ErrNotExecutable)
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request, who principal) error {
	id := r.PathValue("id")
	call, err := decodeExec(s.bodyOf(w, r))
	if err != nil {
		return err
	}
	// An unknown, foreign or ended sandbox is a plain error response;
	// after this check the status line goes out at once, so a client sees
	// the stream begin even while a command is silent.
	info, err := s.sandboxOf(r.Context(), who, id)
	if err != nil {
		return err
	}
	if gated, err := s.gateExec(w, r, who, id, &call, execMode(r)); gated || err != nil {
		return err
	}
	req := call.req
	wait := r.URL.Query().Get("wait")
	if wait == "1" || wait == "true" {
		return s.execWait(w, r, who, id, req)
	}
	if !session.Active(info.State) { // a paused one resumes for the command
		return s.notRunning(r, id, fmt.Errorf("%w: %s", session.ErrNotFound, id))
	}
	return s.streamExec(r, who, id, req, newFrameStream(w, http.StatusOK))
}

// newFrameStream is a stream whose status line, status, goes out with
// its first frame. A stream lasts as long as its command: the server's
// write timeout, if any, is lifted for this response.
func newFrameStream(w http.ResponseWriter, status int) *frameStream {
	st := &frameStream{w: w, rc: http.NewResponseController(w), status: status}
	_ = st.rc.SetWriteDeadline(time.Time{})
	return st
}

// streamExec runs req in sandbox id, its output as frames of st, and
// ends st with the exit frame. A command refused before it starts is a
// plain error answer when st has not begun.
func (s *Server) streamExec(r *http.Request, who principal, id string, req sandbox.ExecRequest, st *frameStream) error {
	req.Stdout, req.Stderr = st.stream("stdout"), st.stream("stderr")
	return s.streamRun(r, id, st, func(starting func()) (sandbox.ExecResult, error) {
		return s.m.ExecStarting(r.Context(), who.Name, id, req, starting)
	})
}

// streamRun is streamExec's end for a command whose output already goes
// to st's streams: run runs it, calling starting just before it starts.
func (s *Server) streamRun(r *http.Request, id string, st *frameStream, run func(starting func()) (sandbox.ExecResult, error)) error {
	// The status line goes out once the command is about to start (its
	// audit record is durable), so a client sees the stream begin even
	// while a command is silent, and a refused command is a plain error.
	res, err := run(st.begin)
	if !st.started() {
		if err == nil {
			st.begin()
		} else if !isStartFailure(err) {
			return s.notRunning(r, id, err)
		}
	}
	st.finish()
	fr := wire.ExecExitFrame{Exit: res.ExitCode, DurationMS: res.Duration.Milliseconds(), Truncated: res.Truncated, TimedOut: res.TimedOut, OOMKilled: res.OOMKilled}
	switch {
	case err == nil || isStartFailure(err):
		s.metrics.exited(res.ExitCode, res.Duration)
		if err != nil {
			fr.Error = err.Error()
		}
	default:
		// The command did not run, or its end is unknown (the sandbox
		// ended under it, the client went away).
		ae := classify(s.notRunning(r, id, err))
		if ae == errInternal && r.Context().Err() == nil {
			s.cfg.Logf("api: exec in %s: %v", id, err)
		}
		fr.Exit, fr.Error = -1, ae.message
	}
	_ = st.hold(fr)
	return nil
}

// execWait runs a command to its end and answers one JSON object with its
// output (wire.ExecWaitResult). The output is held in memory until then, so it has a cap of its
// own (WaitOutputBytes, below the sandbox's output limit when that is
// larger): the rest is dropped and reported as truncated, as the stream
// does past the sandbox's limit. The answer is encoded in chunks straight
// to the connection, so the daemon holds little more than the output.
func (s *Server) execWait(w http.ResponseWriter, r *http.Request, who principal, id string, req sandbox.ExecRequest) error {
	limit := s.cfg.WaitOutputBytes
	if req.OutputBytes > 0 && req.OutputBytes < limit {
		limit = req.OutputBytes
	}
	req.OutputBytes = limit
	out := &cappedOutput{max: limit}
	req.Stdout, req.Stderr = out.stream(0), out.stream(1)
	res, err := s.m.Exec(r.Context(), who.Name, id, req)
	if err != nil && !isStartFailure(err) {
		return s.notRunning(r, id, err)
	}
	s.metrics.exited(res.ExitCode, res.Duration)
	fr := wire.ExecExitFrame{Exit: res.ExitCode, DurationMS: res.Duration.Milliseconds(),
		Truncated: res.Truncated || out.dropped, TimedOut: res.TimedOut, OOMKilled: res.OOMKilled}
	if err != nil {
		fr.Error = err.Error()
	}
	tail, err := json.Marshal(fr)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	out.mu.Lock()
	defer out.mu.Unlock()
	stdout, stderr := out.buf[0].Bytes(), out.buf[1].Bytes()
	if len(stdout)+len(stderr) <= inlineWaitOutput {
		// The common answer, a command with little output: built in one
		// buffer of about its size and sent with its length, in one write.
		var body bytes.Buffer
		body.Grow(len(stdout) + len(stderr) + len(tail) + 32)
		writeWaitResult(&body, stdout, stderr, tail)
		w.Header().Set("Content-Length", strconv.Itoa(body.Len()))
		w.WriteHeader(http.StatusOK)
		_, err := w.Write(body.Bytes())
		return err
	}
	w.WriteHeader(http.StatusOK)
	bw := waitWriters.Get().(*bufio.Writer)
	bw.Reset(w)
	defer func() {
		bw.Reset(nil) // the pool must not keep the connection reachable
		waitWriters.Put(bw)
	}()
	writeWaitResult(bw, stdout, stderr, tail)
	return bw.Flush()
}

// inlineWaitOutput is the most output an exec ?wait=1 answer is built in
// memory for; a larger one is encoded in chunks straight to the connection
// (through one of waitWriters), so the daemon holds little more than the
// output.
const inlineWaitOutput = 16 << 10

// waitWriters are the buffers larger ?wait=1 answers are encoded through:
// one 32 KiB buffer per answer in flight, reused instead of allocated
// (and its fresh pages touched) per answer.
var waitWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 32<<10) }}

// jsonWriter is what the answer encoders write to: a *bufio.Writer or a
// *bytes.Buffer. Neither fails on its own (a bufio.Writer keeps the
// first error of what it writes to for Flush), so their results are not
// checked.
type jsonWriter interface {
	io.Writer
	io.ByteWriter
	io.StringWriter
}

// writeWaitResult writes wire.ExecWaitResult by hand so that the output
// is not copied again: the two strings, then the exit frame's members
// (tail, the encoded wire.ExecExitFrame).
func writeWaitResult(w jsonWriter, stdout, stderr, tail []byte) {
	w.WriteString(`{"stdout":`)
	writeJSONString(w, stdout)
	w.WriteString(`,"stderr":`)
	writeJSONString(w, stderr)
	w.WriteByte(',')
	w.Write(tail[1:])
	w.WriteByte('\n')
}

// cappedOutput keeps the first max bytes of two streams together, the
// way the sandbox's own output limit does, and drops the rest.
type cappedOutput struct {
	mu      sync.Mutex // the runtime may write both streams at once
	max     int64
	kept    int64
	dropped bool
	buf     [2]bytes.Buffer
}

func (c *cappedOutput) stream(i int) io.Writer { return cappedStream{c, i} }

type cappedStream struct {
	c *cappedOutput
	i int
}

func (s cappedStream) Write(p []byte) (int, error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := min(int64(len(p)), c.max-c.kept)
	if keep < int64(len(p)) {
		c.dropped = true
	}
	if keep > 0 {
		c.buf[s.i].Write(p[:keep])
		c.kept += keep
	}
	return len(p), nil
}

// maxFrameText bounds the text of one stdout or stderr frame, so that a
// runtime handing over a large write does not make the daemon encode (and
// hold, escaped up to six times larger) one huge frame.
const maxFrameText = 32 << 10

// writeJSONString writes b as a JSON string, encoding it in pieces cut at
// rune boundaries; invalid UTF-8 becomes U+FFFD, as encoding/json does.
func writeJSONString(w jsonWriter, b []byte) {
	w.WriteByte('"')
	for len(b) > 0 {
		n := framePiece(b)
		enc, _ := json.Marshal(string(b[:n]))
		w.Write(enc[1 : len(enc)-1])
		b = b[n:]
	}
	w.WriteByte('"')
}

// frameStream writes NDJSON frames to the response, one at a time, and
// flushes each. The status line goes out with the first frame, so a
// request that fails before any output still gets a plain error response.
type frameStream struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	status int // of the status line; 0 is 200

	mu      sync.Mutex
	begun   bool
	closed  bool  // finish was called: late writes from the runtime are dropped
	err     error // the first write error (the client went away)
	streams []*streamWriter
}

// started reports whether the status line has gone out.
func (f *frameStream) started() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.begun
}

// begin sends the status line and headers.
func (f *frameStream) begin() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.beginLocked()
	if err := f.rc.Flush(); err != nil {
		f.err = err
	}
}

func (f *frameStream) beginLocked() {
	if f.begun {
		return
	}
	f.begun = true
	f.w.Header().Set("Content-Type", "application/x-ndjson")
	f.w.Header().Set("X-Content-Type-Options", "nosniff")
	f.w.WriteHeader(cmp.Or(f.status, http.StatusOK))
}

// finish flushes partial runes held back by the streams and stops them.
func (f *frameStream) finish() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.streams {
		if len(s.carry) > 0 && !f.closed {
			_ = f.writeLocked(s.frame(string(s.carry)))
		}
		s.carry = nil
	}
	f.closed = true
}

// frame writes one frame and sends it (even after finish).
func (f *frameStream) frame(v any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writeLocked(v)
}

// hold writes a frame (even after finish) without sending it: it goes
// out with the next frame sent or with the end of the body. The last
// frame of a stream is held, so that the handler's return sends it and
// the body's end in one write instead of two.
func (f *frameStream) hold(v any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bufferLocked(v)
}

func (f *frameStream) writeLocked(v any) error {
	if err := f.bufferLocked(v); err != nil {
		return err
	}
	if err := f.rc.Flush(); err != nil {
		f.err = err
	}
	return f.err
}

func (f *frameStream) bufferLocked(v any) error {
	if f.err != nil {
		return f.err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	f.beginLocked()
	if _, err := f.w.Write(append(b, '\n')); err != nil {
		f.err = err
	}
	return f.err
}

// stream returns the writer for one output stream. It sends whole UTF-8
// sequences only, holding back a sequence split across writes until the
// rest arrives; invalid bytes become U+FFFD when the frame is encoded.
func (f *frameStream) stream(name string) *streamWriter {
	s := &streamWriter{f: f, name: name}
	f.streams = append(f.streams, s)
	return s
}

type streamWriter struct {
	f     *frameStream
	name  string // stdout or stderr
	carry []byte // guarded by f.mu
}

// frame is an output frame of this stream.
func (s *streamWriter) frame(text string) wire.ExecOutputFrame {
	if s.name == "stderr" {
		return wire.ExecOutputFrame{Stderr: &text}
	}
	return wire.ExecOutputFrame{Stdout: &text}
}

func (s *streamWriter) Write(p []byte) (int, error) {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return len(p), nil
	}
	buf := append(s.carry, p...)
	s.carry = nil
	if cut := incompleteTail(buf); cut < len(buf) {
		s.carry = append([]byte(nil), buf[cut:]...)
		buf = buf[:cut]
	}
	for len(buf) > 0 {
		n := framePiece(buf)
		if err := f.writeLocked(s.frame(string(buf[:n]))); err != nil {
			return 0, err
		}
		buf = buf[n:]
	}
	return len(p), nil
}

// framePiece returns how many of b's leading bytes go into one piece of
// frame text: all of them, or at most maxFrameText cut before a rune that
// would not fit whole.
func framePiece(b []byte) int {
	if len(b) <= maxFrameText {
		return len(b)
	}
	if cut := incompleteTail(b[:maxFrameText]); cut > 0 {
		return cut
	}
	return maxFrameText
}

// incompleteTail returns where a trailing, possibly incomplete UTF-8
// sequence starts in b, or len(b) if b ends on a whole rune (or on bytes
// that can never become one).
func incompleteTail(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if b[i] >= 0xC0 && !utf8.FullRune(b[i:]) {
				return i
			}
			return len(b)
		}
	}
	return len(b)
}
