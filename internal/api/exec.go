package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/session"
)

// exitFrame is the last frame of an exec stream; with Stdout and Stderr it
// is also the ?wait=1 response.
type exitFrame struct {
	Stdout     *string `json:"stdout,omitempty"`
	Stderr     *string `json:"stderr,omitempty"`
	Exit       int     `json:"exit"`
	DurationMS int64   `json:"duration_ms"`
	Truncated  bool    `json:"truncated"`
	TimedOut   bool    `json:"timed_out"`
	OOMKilled  bool    `json:"oom_killed"`
	Error      string  `json:"error,omitempty"`
}

func isStartFailure(err error) bool {
	return errors.Is(err, sandbox.ErrCommandNotFound) || errors.Is(err, sandbox.ErrNotExecutable)
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request, who principal) error {
	id := r.PathValue("id")
	call, err := decodeExec(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
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
	if info.State != session.StateRunning {
		return s.notRunning(r, id, fmt.Errorf("%w: %s", session.ErrNotFound, id))
	}
	st := &frameStream{w: w, rc: http.NewResponseController(w)}
	// A stream lasts as long as its command: lift the server's write
	// timeout, if any, for this response.
	_ = st.rc.SetWriteDeadline(time.Time{})
	st.begin()
	req.Stdout, req.Stderr = st.stream("stdout"), st.stream("stderr")
	res, err := s.m.Exec(r.Context(), who.Name, id, req)
	st.finish()
	fr := exitFrame{Exit: res.ExitCode, DurationMS: res.Duration.Milliseconds(), Truncated: res.Truncated, TimedOut: res.TimedOut, OOMKilled: res.OOMKilled}
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
	_ = st.frame(fr)
	return nil
}

func (s *Server) execWait(w http.ResponseWriter, r *http.Request, who principal, id string, req sandbox.ExecRequest) error {
	var stdout, stderr bytes.Buffer
	var mu sync.Mutex // the runtime may write both streams at once
	req.Stdout = lockedWriter{&mu, &stdout}
	req.Stderr = lockedWriter{&mu, &stderr}
	res, err := s.m.Exec(r.Context(), who.Name, id, req)
	if err != nil && !isStartFailure(err) {
		return s.notRunning(r, id, err)
	}
	s.metrics.exited(res.ExitCode, res.Duration)
	mu.Lock()
	out, errOut := stdout.String(), stderr.String()
	mu.Unlock()
	fr := exitFrame{Stdout: &out, Stderr: &errOut, Exit: res.ExitCode, DurationMS: res.Duration.Milliseconds(),
		Truncated: res.Truncated, TimedOut: res.TimedOut, OOMKilled: res.OOMKilled}
	if err != nil {
		fr.Error = err.Error()
	}
	writeJSON(w, http.StatusOK, fr)
	return nil
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// frameStream writes NDJSON frames to the response, one at a time, and
// flushes each. The status line goes out with the first frame, so a
// request that fails before any output still gets a plain error response.
type frameStream struct {
	w  http.ResponseWriter
	rc *http.ResponseController

	mu      sync.Mutex
	begun   bool
	closed  bool  // finish was called: late writes from the runtime are dropped
	err     error // the first write error (the client went away)
	streams []*streamWriter
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
	f.w.WriteHeader(http.StatusOK)
}

// finish flushes partial runes held back by the streams and stops them.
func (f *frameStream) finish() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.streams {
		if len(s.carry) > 0 && !f.closed {
			_ = f.writeLocked(map[string]string{s.name: string(s.carry)})
		}
		s.carry = nil
	}
	f.closed = true
}

// frame writes one frame (even after finish: that is how the exit frame
// goes out).
func (f *frameStream) frame(v any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writeLocked(v)
}

func (f *frameStream) writeLocked(v any) error {
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
		return err
	}
	if err := f.rc.Flush(); err != nil {
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
	name  string
	carry []byte // guarded by f.mu
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
	if len(buf) == 0 {
		return len(p), nil
	}
	if err := f.writeLocked(map[string]string{s.name: string(buf)}); err != nil {
		return 0, err
	}
	return len(p), nil
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
