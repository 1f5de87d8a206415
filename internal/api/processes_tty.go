package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/session"
)

// Terminals: GET /v1/sandboxes/{id}/processes/{pid}/tty is a WebSocket
// on a process spawned with pty. Binary messages carry terminal bytes
// both ways; the client's text messages are JSON controls ({"resize":
// {"rows", "cols"}}); the server's text messages are {"dropped": N} (the
// ring no longer holds the N bytes before the scrollback it sends) and,
// last, {"exit": N}. One writer per process: a second attach is 409.

const (
	// maxTerminalMessage bounds one message from the client.
	maxTerminalMessage = 64 << 10
	// terminalPing is how often an attached client is pinged; a client
	// that does not answer within terminalPingWait is dropped.
	terminalPing     = 30 * time.Second
	terminalPingWait = 15 * time.Second
	// terminalWriteWait bounds one message to the client: a client that
	// does not read is dropped (the process runs on; its ring keeps the
	// output for a later attach).
	terminalWriteWait = 30 * time.Second
)

func (s *Server) ttyRoutes(agent func(string, handlerFunc)) {
	agent("GET /v1/sandboxes/{id}/processes/{pid}/tty", s.processTTY)
	agent("POST /v1/sandboxes/{id}/processes/{pid}/resize", s.resizeTerminal)
}

// resizeTerminal sets a process's terminal size without attaching to it
// (for clients that read the output and type through the plain routes).
func (s *Server) resizeTerminal(w http.ResponseWriter, r *http.Request, who principal) error {
	id := r.PathValue("id")
	if err := s.runningOf(r, who, id); err != nil {
		return err
	}
	var b wire.TerminalSize
	if err := decodeJSON(s.bodyOf(w, r), &b); err != nil {
		if err == io.EOF {
			return badRequest(`empty body: {"rows": R, "cols": C} is required`)
		}
		return err
	}
	pid, err := pidOf(r)
	if err != nil {
		return err
	}
	if b.Rows < 1 || b.Rows > session.MaxTerminalSize || b.Cols < 1 || b.Cols > session.MaxTerminalSize {
		return badRequest(fmt.Sprintf("rows and cols are 1 to %d", session.MaxTerminalSize))
	}
	if err := s.m.ResizeTerminal(id, pid, b.Rows, b.Cols); err != nil {
		return s.notRunning(r, id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) processTTY(w http.ResponseWriter, r *http.Request, who principal) error {
	id, pid, err := s.procOf(r, who)
	if err != nil {
		return err
	}
	var offset int64
	if v := r.URL.Query().Get("offset"); v != "" {
		if offset, err = strconv.ParseInt(v, 10, 64); err != nil || offset < 0 {
			return badRequest("offset " + quote(v) + " must be a byte offset (a number, 0 or more)")
		}
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return badRequest(`a terminal is a WebSocket: send "Connection: Upgrade" and "Upgrade: websocket"`)
	}
	term, err := s.m.AttachTerminal(r.Context(), who.Name, id, pid)
	if err != nil {
		return s.notRunning(r, id, err)
	}
	defer term.Close()
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{}) // the session lives as long as both ends
	_ = rc.SetWriteDeadline(time.Time{})
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{})
	if err != nil {
		return nil // Accept answered the client
	}
	defer conn.CloseNow()
	conn.SetReadLimit(maxTerminalMessage)
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()

	// Input: terminal bytes and controls, until the client goes or the
	// session ends.
	inputErr := make(chan error, 1)
	go func() {
		defer cancel()
		inputErr <- s.terminalInput(ctx, conn, term)
	}()
	// Liveness: a ping every terminalPing.
	go func() {
		tick := time.NewTicker(terminalPing)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), terminalPingWait)
				err := conn.Ping(pctx)
				pcancel()
				if err != nil {
					cancel()
					return
				}
			}
		}
	}()

	// Writes are never cut by the session's cancellation: the library
	// drops the connection when a write is interrupted mid-frame, and the
	// close frame that says why would then never be sent.
	send := func(typ websocket.MessageType, b []byte) error {
		wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), terminalWriteWait)
		defer wcancel()
		return conn.Write(wctx, typ, b)
	}
	_, p, rerr := s.m.ReadOutput(ctx, id, pid, offset, true, nil, func(f session.Frame) error {
		if f.Dropped > 0 {
			b, _ := json.Marshal(wire.TerminalDropped{Dropped: f.Dropped, Offset: f.Offset})
			return send(websocket.MessageText, b)
		}
		return send(websocket.MessageBinary, []byte(f.Text))
	})
	term.Close() // detached before the client learns the end: it may attach again at once
	if rerr != nil {
		if ctx.Err() != nil {
			// Cancelled by the input side (or the ping): its verdict says
			// whether the client went away or broke the protocol. Wait for
			// it rather than race it; the cancelled read returns at once.
			if err := <-inputErr; err != nil {
				conn.Close(websocket.StatusPolicyViolation, truncate(err.Error(), 120))
			}
			return nil
		}
		conn.Close(websocket.StatusInternalError, truncate(classify(s.notRunning(r, id, rerr)).message, 120))
		return nil
	}
	code := -1
	if p.Exit != nil {
		code = *p.Exit
	}
	b, _ := json.Marshal(wire.TerminalExit{Exit: code})
	if send(websocket.MessageText, b) == nil {
		conn.Close(websocket.StatusNormalClosure, "the process exited")
	}
	return nil
}

// terminalInput copies the client's messages to the terminal. It returns
// nil when the client closed, an error for a message it refuses.
func (s *Server) terminalInput(ctx context.Context, conn *websocket.Conn, term *session.Terminal) error {
	for {
		typ, b, err := conn.Read(ctx)
		if err != nil {
			if errors.Is(err, websocket.ErrMessageTooBig) {
				return fmt.Errorf("a message is at most %d bytes", maxTerminalMessage)
			}
			return nil
		}
		switch typ {
		case websocket.MessageBinary:
			// After the process exited its input is closed: what is
			// typed then is dropped, and the exit is still sent.
			_ = term.Write(ctx, b)
		case websocket.MessageText:
			var c wire.TerminalControl
			if err := json.Unmarshal(b, &c); err != nil || c.Resize == nil {
				return errors.New(`a text message is a control: {"resize": {"rows": R, "cols": C}}`)
			}
			if err := term.Resize(c.Resize.Rows, c.Resize.Cols); err != nil {
				return fmt.Errorf("resize: rows and cols are 1 to %d", session.MaxTerminalSize)
			}
		}
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "")
}
