package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"sync"

	"github.com/coder/websocket"

	"github.com/ironclaw/ironclaw/internal/api/wire"
)

// maxTerminalMessage bounds one message the daemon sends on a terminal
// (its frames are at most 32 KiB; controls are small).
const maxTerminalMessage = 1 << 20

// Terminal is an attached process terminal (GET .../processes/{pid}/tty):
// Write types into it, Resize sizes it, Copy reads its output to its end.
type Terminal struct {
	conn *websocket.Conn
	ctx  context.Context
	mu   sync.Mutex // one message at a time from Write and Resize
}

// AttachTerminal attaches to the terminal of process pid (spawned with
// PTY), replaying its output from offset. Only one client may be
// attached at a time (a second one is a conflict).
func (c *Client) AttachTerminal(ctx context.Context, id string, pid int, offset int64) (*Terminal, error) {
	u := c.baseURL() + processPath(id, pid, "/tty")
	if offset > 0 {
		u += "?" + url.Values{"offset": {strconv.FormatInt(offset, 10)}}.Encode()
	}
	opts := &websocket.DialOptions{HTTPClient: c.httpClient(), HTTPHeader: map[string][]string{}}
	if t := c.token(agent); t != "" {
		opts.HTTPHeader.Set("Authorization", "Bearer "+t)
	}
	conn, resp, err := websocket.Dial(ctx, u, opts)
	if err != nil {
		if resp != nil && resp.StatusCode/100 != 1 {
			return nil, decodeError(resp)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("cannot reach the ironclaw daemon at %s (is 'ironclaw serve' running?): %w", c.baseURL(), unwrapURL(err))
	}
	conn.SetReadLimit(maxTerminalMessage)
	return &Terminal{conn: conn, ctx: ctx}, nil
}

// Write types p into the terminal (one binary message).
func (t *Terminal) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.conn.Write(t.ctx, websocket.MessageBinary, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Resize sets the terminal's size.
func (t *Terminal) Resize(rows, cols int) error {
	b, _ := json.Marshal(wire.TerminalControl{Resize: &wire.TerminalSize{Rows: rows, Cols: cols}})
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.conn.Write(t.ctx, websocket.MessageText, b)
}

// ErrTerminalClosed is a terminal session that ended before the process
// exited (the daemon or the client closed it).
var ErrTerminalClosed = errors.New("the terminal session ended before the process exited")

// Copy writes the terminal's output to w until the process exited, and
// returns its exit code. dropped, if set, is told of output the daemon no
// longer held. A session that ends otherwise is ErrTerminalClosed (with
// the daemon's reason).
func (t *Terminal) Copy(w io.Writer, dropped func(n int64)) (int, error) {
	for {
		typ, b, err := t.conn.Read(t.ctx)
		if err != nil {
			if t.ctx.Err() != nil {
				return -1, t.ctx.Err()
			}
			if r := closeReason(err); r != "" {
				return -1, fmt.Errorf("%w: %s", ErrTerminalClosed, r)
			}
			return -1, fmt.Errorf("%w: %v", ErrTerminalClosed, err)
		}
		if typ == websocket.MessageBinary {
			if _, err := w.Write(b); err != nil {
				return -1, err
			}
			continue
		}
		var m struct {
			Exit    *int  `json:"exit"`
			Dropped int64 `json:"dropped"`
		}
		if json.Unmarshal(b, &m) != nil {
			continue // a control this client does not know
		}
		if m.Exit != nil {
			t.conn.Close(websocket.StatusNormalClosure, "")
			return *m.Exit, nil
		}
		if m.Dropped > 0 && dropped != nil {
			dropped(m.Dropped)
		}
	}
}

func closeReason(err error) string {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		if ce.Reason != "" {
			return ce.Reason
		}
		return ce.Code.String()
	}
	return ""
}

// Close detaches (the process runs on).
func (t *Terminal) Close() error { return t.conn.Close(websocket.StatusNormalClosure, "") }
