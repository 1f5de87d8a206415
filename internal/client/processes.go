package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/ironclaw/ironclaw/internal/api/wire"
)

// ---- processes ----

// Process is a background process (wire.Process).
type Process = wire.Process

// SpawnRequest starts a background process: exactly one of Cmd (a shell
// line) and Argv.
type SpawnRequest struct {
	Cmd  string
	Argv []string
	Cwd  string
	Env  map[string]string
	Tag  string
	// Stdin opens the process's stdin (WriteStdin, CloseStdin).
	Stdin bool
	// Approval spends an approved exec.command request (mode spawn).
	Approval string
	// PTY runs it on a terminal of Rows x Cols (0: 24 x 80); attach with
	// AttachTerminal.
	PTY        bool
	Rows, Cols int
	// Timeout ends the process (its group, SIGKILL) after that long; 0:
	// none.
	Timeout time.Duration
}

// Wire is r as the API's spawn body.
func (r SpawnRequest) Wire() wire.SpawnProcessRequest {
	w := wire.SpawnProcessRequest{Argv: r.Argv, Cwd: r.Cwd, Tag: r.Tag, Stdin: r.Stdin, Approval: r.Approval,
		PTY: r.PTY, Rows: r.Rows, Cols: r.Cols, Timeout: wire.Duration(r.Timeout)}
	if r.Cmd != "" {
		w.Cmd = &r.Cmd
	}
	if len(r.Env) > 0 {
		w.Env = r.Env
	}
	return w
}

func processPath(id string, pid int, rest string) string {
	return sandboxPath(id, "/processes/"+strconv.Itoa(pid)+rest)
}

// Spawn starts a background process and returns it once it runs. A
// command the policy gates answers *ApprovalRequiredError.
func (c *Client) Spawn(ctx context.Context, id string, req SpawnRequest) (Process, error) {
	var p Process
	resp, err := c.do(ctx, agent, http.MethodPost, sandboxPath(id, "/processes"), nil, req.Wire())
	if err != nil {
		return p, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusAccepted {
		var out wire.ExecPending
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return p, fmt.Errorf("spawn: decoding the approval request: %w", err)
		}
		return p, &ApprovalRequiredError{Approval: out.Approval}
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		return p, fmt.Errorf("spawn: decoding the daemon's answer: %w", err)
	}
	return p, nil
}

// Processes lists a sandbox's processes (running and the exited ones
// kept); tag, if set, keeps those with that tag.
func (c *Client) Processes(ctx context.Context, id, tag string) ([]Process, error) {
	var q url.Values
	if tag != "" {
		q = url.Values{"tag": {tag}}
	}
	var out wire.ProcessList
	err := c.doJSON(ctx, agent, http.MethodGet, sandboxPath(id, "/processes"), q, nil, &out)
	return out.Processes, err
}

// GetProcess describes a process.
func (c *Client) GetProcess(ctx context.Context, id string, pid int) (Process, error) {
	var p Process
	err := c.doJSON(ctx, agent, http.MethodGet, processPath(id, pid, ""), nil, nil, &p)
	return p, err
}

// WaitProcess waits until a process exited and describes it.
func (c *Client) WaitProcess(ctx context.Context, id string, pid int) (Process, error) {
	var p Process
	err := c.doJSON(ctx, agent, http.MethodGet, processPath(id, pid, "/wait"), nil, nil, &p)
	return p, err
}

// KillProcess kills a process (its process group), waits for its end and
// releases it; it returns how it ended.
func (c *Client) KillProcess(ctx context.Context, id string, pid int) (Process, error) {
	var p Process
	err := c.doJSON(ctx, agent, http.MethodDelete, processPath(id, pid, ""), nil, nil, &p)
	return p, err
}

// SignalProcess sends a signal (TERM, INT, HUP, QUIT, KILL, USR1, USR2)
// to a process's group.
func (c *Client) SignalProcess(ctx context.Context, id string, pid int, sig string) error {
	return c.doJSON(ctx, agent, http.MethodPost, processPath(id, pid, "/signal"), nil, wire.ProcessSignalRequest{Signal: sig}, nil)
}

// WriteStdin writes b to a process's stdin (at most 1 MiB a call); close
// closes its stdin after.
func (c *Client) WriteStdin(ctx context.Context, id string, pid int, b []byte, close bool) (wire.StdinWritten, error) {
	var q url.Values
	if close {
		q = url.Values{"close": {"1"}}
	}
	var out wire.StdinWritten
	err := c.doJSON(ctx, agent, http.MethodPost, processPath(id, pid, "/stdin"), q, bytes.NewReader(b), &out)
	return out, err
}

// OutputRequest reads a process's output.
type OutputRequest struct {
	Offset int64
	Follow bool
	// Stdout and Stderr receive the output (nil discards it).
	Stdout, Stderr io.Writer
	// Dropped, if set, is told of bytes the ring no longer held.
	Dropped func(n int64)
}

// ProcessEnd is where an output read stopped.
type ProcessEnd = wire.ProcessEndFrame

// ProcessOutput copies a process's output from req.Offset on (until it
// exited, with Follow) and returns the end frame: its Offset is where a
// later read continues.
func (c *Client) ProcessOutput(ctx context.Context, id string, pid int, req OutputRequest) (ProcessEnd, error) {
	q := url.Values{}
	if req.Offset > 0 {
		q.Set("offset", strconv.FormatInt(req.Offset, 10))
	}
	if req.Follow {
		q.Set("follow", "1")
	}
	resp, err := c.do(ctx, agent, http.MethodGet, processPath(id, pid, "/output"), q, nil)
	if err != nil {
		return ProcessEnd{}, err
	}
	defer resp.Body.Close()
	var end ProcessEnd
	err = readFrames(ctx, resp.Body, 4<<20, "output: the stream broke", func(line []byte) (bool, error) {
		var f struct {
			wire.ProcessOutputFrame
			End bool `json:"end"`
		}
		if err := json.Unmarshal(line, &f); err != nil {
			return false, fmt.Errorf("output: bad frame from the daemon: %w", err)
		}
		if f.End {
			if err := json.Unmarshal(line, &end); err != nil {
				return false, fmt.Errorf("output: bad end frame from the daemon: %w", err)
			}
			return true, nil
		}
		switch {
		case f.Dropped > 0:
			if req.Dropped != nil {
				req.Dropped(f.Dropped)
			}
		case f.Stdout != nil && req.Stdout != nil:
			if _, err := io.WriteString(req.Stdout, *f.Stdout); err != nil {
				return false, err
			}
		case f.Stderr != nil && req.Stderr != nil:
			if _, err := io.WriteString(req.Stderr, *f.Stderr); err != nil {
				return false, err
			}
		}
		return false, nil
	})
	if errors.Is(err, errNoEndFrame) {
		return ProcessEnd{}, errors.New("output: the stream ended without an end frame")
	}
	if err != nil {
		return ProcessEnd{}, err
	}
	return end, nil
}

// ResizeTerminal sets the size of a process's terminal (1-1000 rows and
// columns) without attaching to it.
func (c *Client) ResizeTerminal(ctx context.Context, id string, pid, rows, cols int) error {
	return c.doJSON(ctx, agent, http.MethodPost, processPath(id, pid, "/resize"), nil, wire.TerminalSize{Rows: rows, Cols: cols}, nil)
}
