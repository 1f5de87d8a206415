package wire

// ExecRequest is POST /v1/sandboxes/{id}/exec: exactly one of Cmd (a shell
// line, run as /bin/sh -c) and Argv.
type ExecRequest struct {
	Cmd   *string  `json:"cmd,omitempty"`
	Argv  []string `json:"argv,omitempty"`
	Stdin *string  `json:"stdin,omitempty"`
	// Cwd is a clean absolute path; "" is /workspace.
	Cwd string            `json:"cwd,omitempty"`
	Env map[string]string `json:"env,omitempty"`
	// Timeout: 0 is the sandbox's limit.
	Timeout Duration `json:"timeout,omitempty"`
	// Approval spends an approved exec.command request on this exec.
	Approval string `json:"approval,omitempty"`
}

// ExecOutputFrame is a frame of an exec stream carrying output: exactly
// one of Stdout and Stderr, UTF-8 text of at most 32 KiB.
type ExecOutputFrame struct {
	Stdout *string `json:"stdout,omitempty"`
	Stderr *string `json:"stderr,omitempty"`
}

// ExecExitFrame is the last frame of an exec stream: how the command
// ended. Exit is 128+N for a signal N, 126 or 127 when the command could
// not start (Error says why), and -1 when its end is unknown (the sandbox
// ended under it; Error says what happened).
type ExecExitFrame struct {
	Exit       int    `json:"exit"`
	DurationMS int64  `json:"duration_ms"`
	Truncated  bool   `json:"truncated"`
	TimedOut   bool   `json:"timed_out"`
	OOMKilled  bool   `json:"oom_killed"`
	Error      string `json:"error,omitempty"`
}

// ExecWaitResult is the answer of an exec with ?wait=1: the output (kept
// up to the daemon's --wait-output, then Truncated) and the exit frame.
type ExecWaitResult struct {
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	ExecExitFrame
}

// ExecPending is the 202 answer of an exec that needs an operator's
// approval: the exec.command request filed for it.
type ExecPending struct {
	Approval Approval `json:"approval"`
}
