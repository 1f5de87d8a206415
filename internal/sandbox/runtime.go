package sandbox

import (
	"context"
	"io"
	"io/fs"
	"net"
	"time"
)

// Runtime creates sandboxes. Every backend (native, oci, docker) implements
// it and passes the same conformance suite. Implementations are safe for
// concurrent use.
type Runtime interface {
	// Name is the backend's name, e.g. "native".
	Name() string
	// Create starts a long-lived sandbox for spec. On error nothing is left
	// behind. The caller must call Destroy on the returned Sandbox.
	Create(ctx context.Context, spec Spec) (Sandbox, error)
	// Close destroys every sandbox this Runtime still holds.
	Close(ctx context.Context) error
}

// Sandbox is one running sandbox. Methods are safe for concurrent use; any
// number of Execs may run at once.
type Sandbox interface {
	// ID is unique on this host and safe as a path component.
	ID() string
	// Exec runs one command inside and waits for it. Output is streamed to
	// req.Stdout/req.Stderr as it arrives. A command that ran returns a
	// result and a nil error whatever its exit code; a command that could
	// not start returns an error wrapping ErrCommandNotFound or
	// ErrNotExecutable (and a result with ExitCode 127 or 126).
	Exec(ctx context.Context, req ExecRequest) (ExecResult, error)
	// WriteFile creates or replaces the file at path (under /workspace or
	// /tmp) with the contents of r, creating parent directories. The write
	// runs with the sandbox's own identity and confinement, so a symlink
	// can never lead it to a host file.
	WriteFile(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error
	// ReadFile copies the regular file at path (under /workspace or /tmp)
	// to w, with the same confinement as WriteFile.
	ReadFile(ctx context.Context, path string, w io.Writer) error
	// ListDir lists the directory at path (under /workspace or /tmp), with
	// the same confinement as WriteFile, sorted by name.
	ListDir(ctx context.Context, path string) ([]FileInfo, error)
	// Listener returns the listener for an exposed port
	// (Spec.Network.ExposedTCP): what the caller serves on it is reachable
	// inside the sandbox at 127.0.0.1:port and from nowhere else.
	Listener(port uint16) (net.Listener, bool)
	// Stats reports resource use.
	Stats(ctx context.Context) (Stats, error)
	// Done is closed when the sandbox has ended (destroyed or died).
	Done() <-chan struct{}
	// Destroy kills every process, removes every mount and cgroup the
	// sandbox made. It is idempotent.
	Destroy(ctx context.Context) error
}

// PreparedExec is an exec made ready but not started (a runtime's
// PrepareExec, where it has one): what the command will get is in place
// and nothing of it runs yet. Exactly one of Run or Abort is called.
type PreparedExec interface {
	// Run starts the command and waits for it, as Sandbox.Exec does.
	Run(ctx context.Context) (ExecResult, error)
	// Abort releases what the preparation holds; the command never runs.
	// It does nothing after Run.
	Abort()
}

// ExecRequest is one command to run.
type ExecRequest struct {
	// Argv is the command and its arguments; Argv[0] is looked up in PATH
	// inside the sandbox when it holds no slash. Required.
	Argv []string
	// Env holds extra "KEY=VALUE" pairs on top of the sandbox's.
	Env []string
	// Cwd is the working directory; "" means the Spec's Cwd.
	Cwd string
	// Stdin, when non-nil, is copied to the command's standard input.
	Stdin io.Reader
	// Stdout and Stderr receive output; nil discards it.
	Stdout, Stderr io.Writer
	// TTY runs the command on a terminal allocated inside the sandbox;
	// stdout and stderr are then merged into Stdout.
	TTY bool
	// WindowSize is the initial terminal size when TTY is set.
	WindowSize WindowSize
	// Resize delivers terminal size changes when TTY is set. A size sent
	// before some input is written to Stdin is set before that input
	// reaches the terminal.
	Resize <-chan WindowSize
	// Timeout overrides the Spec's per-exec wall time if smaller and
	// positive (with Background: the wall time, if positive).
	Timeout time.Duration
	// OutputBytes overrides the Spec's output cap if smaller and positive
	// (with Background: the cap, if positive).
	OutputBytes int64
	// Background marks a long-lived process (the processes API): the
	// Spec's per-exec wall time and output cap do not apply (the sandbox's
	// ttl and the caller's own bounded buffer do). Timeout and OutputBytes
	// still apply when set.
	//
	// Everything else is an exec's: the command is killed with its
	// process group when ctx ends and when the sandbox is destroyed, and
	// Exec returns only once it has exited. Output is delivered as it
	// arrives, so Stdout and Stderr must not block for long (they hold
	// the command's pipes); the caller bounds what it keeps.
	Background bool
	// Started, when set, is called once with the command's pid inside the
	// sandbox (its own process group and session leader) as soon as it
	// runs, before any output; not called when it could not start.
	//
	// It is called from Exec's goroutine (native) or the one reading the
	// command's stderr (container backends), and must return promptly;
	// Stdin may already be being read (container backends). The pid is
	// the command's in the sandbox's pid namespace: a second exec can
	// signal its group with `kill -s SIG -- -PID`.
	Started func(pid int)
	// Gate, when set, is the key of a gated program (Spec.Gate; see
	// package gate) that an operator approved for exactly this exec: if
	// Argv[0] reaches that program's stub, the real program runs, for this
	// one exec and only as its top-level program. Only the API sets it,
	// after spending the approval.
	Gate string
}

// FileInfo describes one directory entry inside a sandbox.
type FileInfo struct {
	Name    string      `json:"name"`
	Type    string      `json:"type"` // file, dir, symlink or other
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"mode"`
	ModTime time.Time   `json:"mtime"`
}

// WindowSize is a terminal size in characters.
type WindowSize struct{ Rows, Cols uint16 }

// ExecResult is what a finished command left.
type ExecResult struct {
	// ExitCode follows the shell convention: the command's exit status, or
	// 128+N when killed by signal N (137 for SIGKILL, e.g. a limit).
	ExitCode int
	// Signal is the signal that killed the command, or 0.
	Signal int
	// Duration is the command's wall time.
	Duration time.Duration
	// StdoutBytes and StderrBytes count the bytes produced, kept or not.
	StdoutBytes, StderrBytes int64
	// Truncated is set when output beyond the cap was dropped.
	Truncated bool
	// TimedOut is set when the wall-time limit killed the command.
	TimedOut bool
	// OOMKilled is set when the memory limit killed a process of the
	// sandbox while this command ran.
	OOMKilled bool
}

// Stats is a sandbox's resource use. Pids counts every task, pid 1's
// threads included (which may use InitPidsReserve tasks beyond
// Limits.Pids where the backend reserves them).
type Stats struct {
	MemoryBytes     int64
	MemoryPeakBytes int64
	CPUUsage        time.Duration
	Pids            int64
	OOMKills        int64
}
