package wire

import "time"

// SpawnProcessRequest is POST /v1/sandboxes/{id}/processes: exactly one of
// Cmd (a shell line, run as /bin/sh -c) and Argv.
type SpawnProcessRequest struct {
	Cmd  *string  `json:"cmd,omitempty"`
	Argv []string `json:"argv,omitempty"`
	// Cwd is a clean absolute path; "" is /workspace.
	Cwd string            `json:"cwd,omitempty"`
	Env map[string]string `json:"env,omitempty"`
	// Tag names the process for ?tag= lookups: at most 64 bytes of
	// letters, digits and . _ - : /.
	Tag string `json:"tag,omitempty"`
	// Stdin opens the process's stdin (POST .../stdin); without it the
	// process reads end of file.
	Stdin bool `json:"stdin,omitempty"`
	// Approval spends an approved exec.command request (mode "spawn").
	Approval string `json:"approval,omitempty"`
	// PTY runs the process on a terminal inside the sandbox (the native
	// backend; others answer 503): its output is one stream (stdout), its
	// stdin the terminal's input (always open); attach with GET .../tty.
	PTY bool `json:"pty,omitempty"`
	// Rows and Cols are the terminal's first size (1-1000; 0: 24 x 80).
	Rows int `json:"rows,omitempty"`
	Cols int `json:"cols,omitempty"`
	// Timeout ends the process (its group, SIGKILL) after that long (exit
	// 137, timed out); absent, it runs until it exits, is killed or its
	// sandbox ends.
	Timeout Duration `json:"timeout,omitempty"`
}

// Process is a background process (GET /v1/sandboxes/{id}/processes/{pid}).
// PID is the daemon's handle, unique in its sandbox; OSPID its pid inside
// the sandbox (0 until known). State is running or exited; Exit is set
// once it exited (128+N for signal N, 126/127 when it could not start,
// -1 when its end is unknown). Offset is the end of its output log, and
// Dropped where the part still held begins.
type Process struct {
	PID       int       `json:"pid"`
	OSPID     int       `json:"os_pid"`
	Tag       string    `json:"tag"`
	Argv      []string  `json:"argv"`
	State     string    `json:"state"`
	Exit      *int      `json:"exit,omitempty"`
	Error     string    `json:"error,omitempty"`
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	Offset    int64     `json:"offset"`
	Dropped   int64     `json:"dropped"`
	Stdin     bool      `json:"stdin"`
	// PTY: it runs on a terminal; Attached: a terminal client is attached.
	PTY      bool `json:"pty"`
	Attached bool `json:"attached"`
}

// ProcessList is GET /v1/sandboxes/{id}/processes, oldest first.
type ProcessList struct {
	Processes []Process `json:"processes"`
}

// ProcessOutputFrame is a line of GET .../processes/{pid}/output: output
// (exactly one of Stdout and Stderr, UTF-8 of at most 32 KiB) starting at
// byte Offset of the process's log, or, with Dropped, a note that the
// Dropped bytes before Offset are no longer held (the ring overwrote them).
type ProcessOutputFrame struct {
	Offset  int64   `json:"offset"`
	Stdout  *string `json:"stdout,omitempty"`
	Stderr  *string `json:"stderr,omitempty"`
	Dropped int64   `json:"dropped,omitempty"`
}

// ProcessEndFrame is the last line of GET .../processes/{pid}/output:
// Offset is where a later read continues; State running when the read
// stopped before the process exited, exited (with Exit) when it has.
type ProcessEndFrame struct {
	End    bool   `json:"end"`
	Offset int64  `json:"offset"`
	State  string `json:"state"`
	Exit   *int   `json:"exit,omitempty"`
	Error  string `json:"error,omitempty"`
}

// ProcessSignalRequest is POST .../processes/{pid}/signal: one of HUP,
// INT, QUIT, KILL, USR1, USR2, TERM (a SIG prefix is allowed).
type ProcessSignalRequest struct {
	Signal string `json:"signal"`
}

// StdinWritten is the answer of POST .../processes/{pid}/stdin.
type StdinWritten struct {
	Written int64 `json:"written"`
	Closed  bool  `json:"closed"`
}

// TerminalControl is a text message of a terminal client on GET
// .../processes/{pid}/tty.
type TerminalControl struct {
	Resize *TerminalSize `json:"resize,omitempty"`
}

// TerminalSize is a terminal's size in characters, 1-1000 each.
type TerminalSize struct {
	Rows int `json:"rows"`
	Cols int `json:"cols"`
}

// TerminalDropped is a text message of the server on a terminal: the
// ring no longer holds the Dropped bytes before Offset, where the
// scrollback it sends begins.
type TerminalDropped struct {
	Dropped int64 `json:"dropped"`
	Offset  int64 `json:"offset"`
}

// TerminalExit is the server's last text message on a terminal: the
// process exited with Exit.
type TerminalExit struct {
	Exit int `json:"exit"`
}
