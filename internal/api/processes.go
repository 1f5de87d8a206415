package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/netlimit"
	"github.com/ironclaw/ironclaw/internal/session"
)

// Background processes (session/processes.go): the routes under
// /v1/sandboxes/{id}/processes. Ownership is the sandbox's: another
// principal's sandbox is 404 here as everywhere.

// maxStdinRequest bounds the body of one stdin write; it is read whole
// before any of it is written, so a body over the limit changes nothing.
const maxStdinRequest = 1 << 20

// modeSpawn is the exec.command mode an approved spawn binds.
const modeSpawn = "spawn"

func (s *Server) processRoutes(agent func(string, handlerFunc)) {
	agent("POST /v1/sandboxes/{id}/processes", s.spawnProcess)
	agent("GET /v1/sandboxes/{id}/processes", s.listProcesses)
	agent("GET /v1/sandboxes/{id}/processes/{pid}", s.getProcess)
	agent("DELETE /v1/sandboxes/{id}/processes/{pid}", s.killProcess)
	agent("GET /v1/sandboxes/{id}/processes/{pid}/wait", s.waitProcess)
	agent("GET /v1/sandboxes/{id}/processes/{pid}/output", s.processOutput)
	agent("POST /v1/sandboxes/{id}/processes/{pid}/stdin", s.processStdin)
	agent("POST /v1/sandboxes/{id}/processes/{pid}/signal", s.signalProcess)
	s.ttyRoutes(agent)
}

func processView(p session.ProcessInfo) wire.Process {
	argv := p.Argv
	if argv == nil {
		argv = []string{}
	}
	return wire.Process{PID: p.PID, OSPID: p.OSPID, Tag: p.Tag, Argv: argv, State: p.State, Exit: p.Exit, Error: p.Error,
		StartedAt: utc(p.StartedAt), EndedAt: utc(p.EndedAt), Offset: p.Offset, Dropped: p.Dropped, Stdin: p.Stdin,
		PTY: p.TTY, Attached: p.Attached}
}

// runningOf checks that who may use sandbox id and that it runs.
func (s *Server) runningOf(r *http.Request, who principal, id string) error {
	info, err := s.sandboxOf(r.Context(), who, id)
	if err != nil {
		return err
	}
	if info.State != session.StateRunning {
		return s.notRunning(r, id, fmt.Errorf("%w: %s", session.ErrNotFound, id))
	}
	return nil
}

// pidOf reads the {pid} of the path.
func pidOf(r *http.Request) (int, error) {
	v := r.PathValue("pid")
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, badRequest("process " + quote(v) + " is not a process handle (a positive number)")
	}
	return n, nil
}

// procOf checks the caller's sandbox and reads the process handle.
func (s *Server) procOf(r *http.Request, who principal) (string, int, error) {
	id := r.PathValue("id")
	if err := s.runningOf(r, who, id); err != nil {
		return id, 0, err
	}
	pid, err := pidOf(r)
	return id, pid, err
}

func checkTag(tag string) error {
	if len(tag) > session.MaxTag {
		return badRequest(fmt.Sprintf("tag: at most %d bytes", session.MaxTag))
	}
	for _, c := range tag {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':' || c == '/') {
			return badRequest("tag " + quote(tag) + ": letters, digits and . _ - : / only")
		}
	}
	return nil
}

// maxProcessTimeout bounds a spawn's timeout: a week, as the longest
// approval timeout; a process that should run longer asks for none.
const maxProcessTimeout = 7 * 24 * time.Hour

func (s *Server) spawnProcess(w http.ResponseWriter, r *http.Request, who principal) error {
	id := r.PathValue("id")
	var b wire.SpawnProcessRequest
	if err := decodeJSON(s.bodyOf(w, r), &b); err != nil {
		if err == io.EOF {
			return badRequest("empty body: a command (cmd or argv) is required")
		}
		return err
	}
	argv, line, err := commandArgv(b.Cmd, b.Argv)
	if err != nil {
		return err
	}
	if b.Cwd != "" && (!path.IsAbs(b.Cwd) || path.Clean(b.Cwd) != b.Cwd) {
		return badRequest(fmt.Sprintf("cwd %s must be a clean absolute path", quote(b.Cwd)))
	}
	env, err := envList(b.Env)
	if err != nil {
		return err
	}
	if err := checkTag(b.Tag); err != nil {
		return err
	}
	if !b.PTY && (b.Rows != 0 || b.Cols != 0) {
		return badRequest("rows and cols are a terminal's size: they need pty")
	}
	if b.PTY && (b.Rows < 0 || b.Rows > session.MaxTerminalSize || b.Cols < 0 || b.Cols > session.MaxTerminalSize) {
		return badRequest(fmt.Sprintf("rows and cols are 1 to %d", session.MaxTerminalSize))
	}
	if t := time.Duration(b.Timeout); t < 0 || t > maxProcessTimeout {
		return badRequest(fmt.Sprintf("timeout must be at most %s", maxProcessTimeout))
	}
	if err := s.runningOf(r, who, id); err != nil {
		return err
	}
	// The policy's gate and advisory apply as to an exec; an approval
	// binds argv and the mode "spawn".
	call := execCall{line: line, approval: b.Approval}
	call.req.Argv = argv
	if gated, err := s.gateExec(w, r, who, id, &call, modeSpawn); gated || err != nil {
		return err
	}
	p, err := s.m.Spawn(r.Context(), who.Name, id, session.SpawnRequest{Argv: call.req.Argv, Cwd: b.Cwd, Env: env, Tag: b.Tag,
		Stdin: b.Stdin, Gate: call.req.Gate, TTY: b.PTY, Rows: b.Rows, Cols: b.Cols, Timeout: time.Duration(b.Timeout)})
	if err != nil {
		return s.notRunning(r, id, err)
	}
	writeJSON(w, http.StatusCreated, processView(p))
	return nil
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request, who principal) error {
	id := r.PathValue("id")
	if err := s.runningOf(r, who, id); err != nil {
		return err
	}
	tag := r.URL.Query().Get("tag")
	if err := checkTag(tag); err != nil {
		return err
	}
	ps, err := s.m.Processes(id, tag)
	if err != nil {
		return s.notRunning(r, id, err)
	}
	writeJSON(w, http.StatusOK, wire.ProcessList{Processes: views(ps, processView)})
	return nil
}

func isTrue(v string) bool { return v == "1" || v == "true" }

func (s *Server) getProcess(w http.ResponseWriter, r *http.Request, who principal) error {
	return s.writeProcess(w, r, who, isTrue(r.URL.Query().Get("wait")))
}

func (s *Server) waitProcess(w http.ResponseWriter, r *http.Request, who principal) error {
	return s.writeProcess(w, r, who, true)
}

// writeProcess answers with the process's view: with wait, once it has
// exited.
func (s *Server) writeProcess(w http.ResponseWriter, r *http.Request, who principal, wait bool) error {
	id, pid, err := s.procOf(r, who)
	if err != nil {
		return err
	}
	var p session.ProcessInfo
	if wait {
		// A wait lasts as long as the process: lift the write timeout.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		p, err = s.m.WaitProcess(r.Context(), id, pid)
	} else {
		p, err = s.m.Process(id, pid)
	}
	if err != nil {
		return s.notRunning(r, id, err)
	}
	writeJSON(w, http.StatusOK, processView(p))
	return nil
}

func (s *Server) killProcess(w http.ResponseWriter, r *http.Request, who principal) error {
	id, pid, err := s.procOf(r, who)
	if err != nil {
		return err
	}
	p, err := s.m.KillProcess(r.Context(), who.Name, id, pid)
	if err != nil && p.PID == 0 {
		return s.notRunning(r, id, err)
	}
	if err != nil {
		s.cfg.Logf("api: killing process %d in %s: %v", pid, id, err)
	}
	writeJSON(w, http.StatusOK, processView(p))
	return nil
}

func (s *Server) signalProcess(w http.ResponseWriter, r *http.Request, who principal) error {
	id := r.PathValue("id")
	if err := s.runningOf(r, who, id); err != nil {
		return err
	}
	var b wire.ProcessSignalRequest
	if err := decodeJSON(s.bodyOf(w, r), &b); err != nil {
		if err == io.EOF {
			return badRequest("empty body: a signal is required")
		}
		return err
	}
	pid, err := pidOf(r)
	if err != nil {
		return err
	}
	if _, err := session.CheckSignal(b.Signal); err != nil {
		return badRequest(fmt.Sprintf("signal %s: one of HUP, INT, QUIT, KILL, USR1, USR2, TERM", quote(b.Signal)))
	}
	if err := s.m.Signal(r.Context(), who.Name, id, pid, b.Signal); err != nil {
		return s.notRunning(r, id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) processStdin(w http.ResponseWriter, r *http.Request, who principal) error {
	id, pid, err := s.procOf(r, who)
	if err != nil {
		return err
	}
	// Whether the process exists and takes stdin is checked before the
	// body is read.
	p, err := s.m.Process(id, pid)
	if err != nil {
		return s.notRunning(r, id, err)
	}
	if !p.Stdin {
		return &apiError{http.StatusConflict, wire.CodeConflict, fmt.Sprintf("process %d has no open stdin (started without stdin, closed, or exited)", pid)}
	}
	body := s.limitBody(w, r, netlimit.BodyLimits{Timeout: s.cfg.BodyTimeout, MinRate: minUploadRate, Idle: s.cfg.BodyTimeout}, maxStdinRequest)
	data, err := io.ReadAll(body)
	if err != nil {
		if berr := body.err(); berr != nil {
			return berr
		}
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &apiError{http.StatusRequestEntityTooLarge, wire.CodeTooLarge, fmt.Sprintf("a stdin write is at most %d bytes; nothing was written", maxStdinRequest)}
		}
		return err
	}
	// Waiting for room in the buffer may take as long as the process
	// takes to read: lift the write timeout.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	if len(data) > 0 {
		if err := s.m.WriteStdin(r.Context(), id, pid, data); err != nil {
			return s.notRunning(r, id, err)
		}
	}
	closed := isTrue(r.URL.Query().Get("close"))
	if closed {
		if err := s.m.CloseStdin(id, pid); err != nil {
			return s.notRunning(r, id, err)
		}
	}
	writeJSON(w, http.StatusOK, wire.StdinWritten{Written: int64(len(data)), Closed: closed})
	return nil
}

func (s *Server) processOutput(w http.ResponseWriter, r *http.Request, who principal) error {
	id, pid, err := s.procOf(r, who)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	var offset int64
	if v := q.Get("offset"); v != "" {
		if offset, err = strconv.ParseInt(v, 10, 64); err != nil || offset < 0 {
			return badRequest("offset " + quote(v) + " must be a byte offset (a number, 0 or more)")
		}
	}
	follow := isTrue(q.Get("follow"))
	info, err := s.m.Process(id, pid)
	if err != nil {
		return s.notRunning(r, id, err)
	}
	st := &frameStream{w: w, rc: http.NewResponseController(w)}
	_ = st.rc.SetWriteDeadline(time.Time{})
	// A terminal's log holds raw bytes, split anywhere; a JSON string
	// cannot carry half a character, so a split sequence goes out whole in
	// the later frame.
	var join utf8Join
	send := func(f session.Frame) error {
		fr := wire.ProcessOutputFrame{Offset: f.Offset, Dropped: f.Dropped}
		text := f.Text
		switch {
		case f.Dropped > 0:
		case f.IsStderr():
			fr.Stderr = &text
		default:
			fr.Stdout = &text
		}
		return st.frame(fr)
	}
	flush := func() error {
		if off, text, ok := join.flush(); ok {
			return send(session.Frame{Offset: off, Text: text})
		}
		return nil
	}
	next, p, rerr := s.m.ReadOutput(r.Context(), id, pid, offset, follow, st.begin, func(f session.Frame) error {
		if !info.TTY {
			return send(f)
		}
		if f.Dropped > 0 {
			if err := flush(); err != nil {
				return err
			}
			join.joined = false
			return send(f)
		}
		f.Offset, f.Text = join.add(f.Offset, f.Text)
		if f.Text == "" {
			return nil
		}
		return send(f)
	})
	if st.started() {
		_ = flush()
	}
	end := wire.ProcessEndFrame{End: true, Offset: next, State: p.State, Exit: p.Exit, Error: p.Error}
	if p.State == "" {
		end.State = session.ProcessRunning
	}
	if rerr != nil && !st.started() {
		return s.notRunning(r, id, rerr) // refused: a plain error answer
	}
	if rerr != nil {
		if r.Context().Err() != nil {
			return nil // the client went away
		}
		end.Error = classify(s.notRunning(r, id, rerr)).message
	}
	_ = st.hold(end) // sent with the body's end
	return nil
}

// utf8Join holds back a UTF-8 sequence cut at the end of a terminal's
// frame and puts it before the next frame's text.
type utf8Join struct {
	held   string
	off    int64 // the offset of held
	joined bool  // text went out since the read began or last dropped bytes
}

// add returns the text of the frame at off with what was held before it
// and without an incomplete sequence at its end, and the text's offset.
func (j *utf8Join) add(off int64, text string) (int64, string) {
	if j.held != "" && j.off+int64(len(j.held)) == off {
		off, text = j.off, j.held+text
	}
	j.held = ""
	if !j.joined {
		// A read that begins inside a character (an offset given, or
		// the ring's oldest byte) starts at the next one, as in a log
		// of text.
		for k := 0; k < utf8.UTFMax-1 && text != "" && !utf8.RuneStart(text[0]); k++ {
			off, text = off+1, text[1:]
		}
		j.joined = text != ""
	}
	tail := text[max(0, len(text)-4):] // a UTF-8 sequence is at most 4 bytes
	if cut := len(text) - len(tail) + incompleteTail([]byte(tail)); cut < len(text) {
		j.held, j.off = text[cut:], off+int64(cut)
		text = text[:cut]
	}
	return off, text
}

// flush returns what is held, if anything.
func (j *utf8Join) flush() (int64, string, bool) {
	h := j.held
	j.held = ""
	return j.off, h, h != ""
}
