package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ironclaw/ironclaw/internal/api/wire"
)

// attach dials a process's terminal.
func (e *env) attach(ctx context.Context, tok, id string, pid int, query string) (*websocket.Conn, *http.Response, error) {
	h := http.Header{}
	if tok != "" {
		h.Set("Authorization", "Bearer "+tok)
	}
	u := fmt.Sprintf("%s/v1/sandboxes/%s/processes/%d/tty?%s", e.ts.URL, id, pid, query)
	return websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h, HTTPClient: e.client})
}

// ttyReader collects a terminal's output.
type ttyReader struct {
	t    *testing.T
	c    *websocket.Conn
	out  bytes.Buffer
	exit *int
	text []string
}

// until reads until the output holds want (or the exit message came).
func (r *ttyReader) until(ctx context.Context, want string) {
	r.t.Helper()
	for want == "" && r.exit == nil || want != "" && !strings.Contains(r.out.String(), want) {
		typ, b, err := r.c.Read(ctx)
		if err != nil {
			r.t.Fatalf("reading the terminal for %q: %v; so far %q", want, err, r.out.String())
		}
		if typ == websocket.MessageBinary {
			r.out.Write(b)
			continue
		}
		r.text = append(r.text, string(b))
		var x struct{ Exit *int }
		if json.Unmarshal(b, &x) == nil && x.Exit != nil {
			r.exit = x.Exit
			if want == "" {
				return
			}
			r.t.Fatalf("exit %d before %q; output %q", *x.Exit, want, r.out.String())
		}
	}
}

func TestProcessTerminal(t *testing.T) {
	const aTok, bTok = "agent-a-token-0123456789abcdef", "agent-b-token-0123456789abcdef"
	e := newEnv(t, envOpts{cfg: Config{Agents: []Agent{{Name: "a", Token: aTok}, {Name: "b", Token: bTok}}}})
	var s sbx
	e.must(http.StatusCreated, "POST", "/v1/sandboxes", aTok, nil, &s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	p := e.spawn(aTok, s.ID, map[string]any{"argv": []string{"sh"}, "pty": true, "rows": 24, "cols": 80})
	if !p.PTY || !p.Stdin || p.State != "running" {
		t.Fatalf("spawned %+v", p)
	}
	c, _, err := e.attach(ctx, aTok, s.ID, p.PID, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	r := &ttyReader{t: t, c: c}

	var got wire.Process
	e.must(200, "GET", fmt.Sprintf("/v1/sandboxes/%s/processes/%d", s.ID, p.PID), aTok, nil, &got)
	if !got.Attached {
		t.Errorf("not attached: %+v", got)
	}

	t.Run("a second writer is refused", func(t *testing.T) {
		_, resp, err := e.attach(ctx, aTok, s.ID, p.PID, "")
		if err == nil || resp == nil || resp.StatusCode != http.StatusConflict {
			t.Fatalf("second attach: %v %v", resp, err)
		}
	})
	t.Run("another agent gets 404", func(t *testing.T) {
		_, resp, err := e.attach(ctx, bTok, s.ID, p.PID, "")
		if err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
			t.Fatalf("b's attach: %v %v", resp, err)
		}
		_, resp, err = e.attach(ctx, "", s.ID, p.PID, "")
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("attach without a token: %v %v", resp, err)
		}
	})
	t.Run("not an upgrade", func(t *testing.T) {
		e.wantError(400, wire.CodeInvalidArgument, "GET", fmt.Sprintf("/v1/sandboxes/%s/processes/%d/tty", s.ID, p.PID), aTok, nil)
	})

	// Resize, then ask the terminal its size.
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"resize":{"rows":40,"cols":120}}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, websocket.MessageBinary, []byte("stty size\n")); err != nil {
		t.Fatal(err)
	}
	r.until(ctx, "40 120")

	// Detach, and reattach where this client stopped: only what came
	// after.
	c.Close(websocket.StatusNormalClosure, "")
	var seen wire.Process
	e.must(200, "GET", fmt.Sprintf("/v1/sandboxes/%s/processes/%d", s.ID, p.PID), aTok, nil, &seen)
	if seen.Offset < int64(r.out.Len()) {
		t.Errorf("offset %d after %d bytes were shown", seen.Offset, r.out.Len())
	}
	var c2 *websocket.Conn
	eventually(t, "a reattach", func() bool {
		c2, _, err = e.attach(ctx, aTok, s.ID, p.PID, fmt.Sprintf("offset=%d", seen.Offset))
		return err == nil
	})
	defer c2.CloseNow()
	r2 := &ttyReader{t: t, c: c2}
	if err := c2.Write(ctx, websocket.MessageBinary, []byte("echo mark$((6*7))\n")); err != nil {
		t.Fatal(err)
	}
	r2.until(ctx, "mark42")
	if strings.Contains(r2.out.String(), "40 120") {
		t.Errorf("a reattach at offset %d replayed older output: %q", seen.Offset, r2.out.String())
	}

	if err := c2.Write(ctx, websocket.MessageBinary, []byte("exit 3\n")); err != nil {
		t.Fatal(err)
	}
	r2.until(ctx, "")
	if r2.exit == nil || *r2.exit != 3 {
		t.Fatalf("exit %v, text messages %q", r2.exit, r2.text)
	}
	if _, _, err := c2.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("after the exit: %v", err)
	}
	w := e.waitProc(aTok, s.ID, p.PID)
	if w.Exit == nil || *w.Exit != 3 || w.Attached {
		t.Errorf("waited %+v", w)
	}

	t.Run("attach after the exit replays and exits", func(t *testing.T) {
		c3, _, err := e.attach(ctx, aTok, s.ID, p.PID, "offset=0")
		if err != nil {
			t.Fatal(err)
		}
		defer c3.CloseNow()
		r3 := &ttyReader{t: t, c: c3}
		r3.until(ctx, "")
		if r3.exit == nil || *r3.exit != 3 || !strings.Contains(r3.out.String(), "40 120") || !strings.Contains(r3.out.String(), "mark42") {
			t.Errorf("exit %v output %q", r3.exit, r3.out.String())
		}
	})

	t.Run("bad input", func(t *testing.T) {
		e.wantError(400, wire.CodeInvalidArgument, "POST", "/v1/sandboxes/"+s.ID+"/processes", aTok, map[string]any{"cmd": "sh", "rows": 10})
		e.wantError(400, wire.CodeInvalidArgument, "POST", "/v1/sandboxes/"+s.ID+"/processes", aTok, map[string]any{"cmd": "sh", "pty": true, "rows": 5000, "cols": 10})
		plain := e.spawn(aTok, s.ID, map[string]any{"cmd": "sleep 30"})
		_, resp, err := e.attach(ctx, aTok, s.ID, plain.PID, "")
		if err == nil || resp == nil || resp.StatusCode != http.StatusConflict {
			t.Fatalf("attach to a process without a terminal: %v %v", resp, err)
		}
		// A text message that is not a control closes the session; a
		// message over the limit too.
		q := e.spawn(aTok, s.ID, map[string]any{"argv": []string{"sh"}, "pty": true})
		for _, m := range []struct {
			typ  websocket.MessageType
			body []byte
			code websocket.StatusCode
		}{
			{websocket.MessageText, []byte(`{"nope":1}`), websocket.StatusPolicyViolation},
			{websocket.MessageBinary, bytes.Repeat([]byte("x"), 65<<10), websocket.StatusMessageTooBig},
		} {
			var cq *websocket.Conn
			eventually(t, "an attach", func() bool {
				cq, _, err = e.attach(ctx, aTok, s.ID, q.PID, "")
				return err == nil
			})
			_ = cq.Write(ctx, m.typ, m.body)
			var rerr error
			for rerr == nil {
				_, _, rerr = cq.Read(ctx)
			}
			if st := websocket.CloseStatus(rerr); st != m.code && !errors.Is(rerr, context.DeadlineExceeded) {
				t.Errorf("after %d bytes: close %v (%v), want %v", len(m.body), st, rerr, m.code)
			}
			cq.CloseNow()
		}
	})

	var kinds []string
	recs, err := e.log.Tail(context.Background(), 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		kinds = append(kinds, r.Kind)
	}
	all := " " + strings.Join(kinds, " ") + " "
	for _, k := range []string{"sandbox.process.attach.intent", "sandbox.process.attach"} {
		if !strings.Contains(all, " "+k+" ") {
			t.Errorf("no %s record", k)
		}
	}
}

// TestResizeTerminal resizes a terminal through the plain route, types
// through stdin and reads through output: no attach.
func TestResizeTerminal(t *testing.T) {
	const aTok, bTok = "agent-a-token-0123456789abcdef", "agent-b-token-0123456789abcdef"
	e := newEnv(t, envOpts{cfg: Config{Agents: []Agent{{Name: "a", Token: aTok}, {Name: "b", Token: bTok}}}})
	var s sbx
	e.must(http.StatusCreated, "POST", "/v1/sandboxes", aTok, nil, &s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := e.spawn(aTok, s.ID, map[string]any{"argv": []string{"sh"}, "pty": true, "rows": 24, "cols": 80})
	pp := fmt.Sprintf("/v1/sandboxes/%s/processes/%d", s.ID, p.PID)

	e.must(http.StatusNoContent, "POST", pp+"/resize", aTok, map[string]int{"rows": 33, "cols": 111}, nil)
	e.must(200, "POST", pp+"/stdin", aTok, "stty size; exit 4\n", nil)
	_, text := e.output(ctx, aTok, s.ID, p.PID, "follow=1", nil)
	if !strings.Contains(text, "33 111") {
		t.Errorf("after the resize the terminal says %q", text)
	}
	if w := e.waitProc(aTok, s.ID, p.PID); w.Exit == nil || *w.Exit != 4 || w.Attached {
		t.Errorf("waited %+v", w)
	}

	e.wantError(409, wire.CodeConflict, "POST", pp+"/resize", aTok, map[string]int{"rows": 10, "cols": 10})
	q := e.spawn(aTok, s.ID, map[string]any{"argv": []string{"sh"}, "pty": true})
	qp := fmt.Sprintf("/v1/sandboxes/%s/processes/%d", s.ID, q.PID)
	for _, b := range []any{nil, map[string]int{"rows": 0, "cols": 10}, map[string]int{"rows": 10, "cols": 1001}, `{"rows": "x"}`} {
		e.wantError(400, wire.CodeInvalidArgument, "POST", qp+"/resize", aTok, b)
	}
	e.wantError(404, wire.CodeNotFound, "POST", qp+"/resize", bTok, map[string]int{"rows": 10, "cols": 10})
	e.wantError(404, wire.CodeNotFound, "POST", fmt.Sprintf("/v1/sandboxes/%s/processes/999/resize", s.ID), aTok, map[string]int{"rows": 10, "cols": 10})
	plain := e.spawn(aTok, s.ID, map[string]any{"cmd": "sleep 30"})
	e.wantError(409, wire.CodeConflict, "POST", fmt.Sprintf("/v1/sandboxes/%s/processes/%d/resize", s.ID, plain.PID), aTok, map[string]int{"rows": 10, "cols": 10})
}

// TestTerminalOutputKeepsCharacters: a terminal's log is raw bytes, cut
// into frames anywhere; the output route still sends whole characters
// (a JSON string cannot carry half of one).
func TestTerminalOutputKeepsCharacters(t *testing.T) {
	const aTok = "agent-a-token-0123456789abcdef"
	e := newEnv(t, envOpts{cfg: Config{Agents: []Agent{{Name: "a", Token: aTok}}}})
	var s sbx
	e.must(http.StatusCreated, "POST", "/v1/sandboxes", aTok, nil, &s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 100000 // 200 KB of two-byte characters: frames of 32 KiB cut some
	p := e.spawn(aTok, s.ID, map[string]any{"argv": []string{"sh", "-c", "stty -opost; printf x; i=0; while [ $i -lt 2000 ]; do printf '" +
		strings.Repeat("é", 50) + "'; i=$((i+1)); done"}, "pty": true})
	for _, q := range []string{"follow=1", "", "offset=2"} {
		frames, text := e.output(ctx, aTok, s.ID, p.PID, q, nil)
		if strings.ContainsRune(text, '\uFFFD') || strings.Count(text, "é") < n-1 || len(frames) < 3 {
			t.Errorf("%q: %d frames, %d é, %d U+FFFD", q, len(frames), strings.Count(text, "é"), strings.Count(text, "\uFFFD"))
		}
		for i := 1; i < len(frames); i++ {
			prev := frames[i-1]
			if prev.Stdout != nil && frames[i].Offset != prev.Offset+int64(len(*prev.Stdout)) {
				t.Errorf("%q: frame %d at %d after %d bytes at %d", q, i, frames[i].Offset, len(*prev.Stdout), prev.Offset)
				break
			}
		}
	}
}
