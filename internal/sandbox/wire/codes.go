package wire

import (
	"fmt"

	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// Failure codes: why pid 1 or the helper could not do what was asked.
// The native init sends them in Reply.Code, the exec front in a "failed"
// header line (Header.Code), a file mode in FileError.Code. Both sides
// name them from here, and the daemon maps them to the sandbox error
// vocabulary in one place (StartError, FileErr).
const (
	// CodeNotFound: the command or the file does not exist (ENOENT,
	// ENOTDIR).
	CodeNotFound = "not-found"
	// CodeNotExecutable: the command exists but cannot be executed.
	CodeNotExecutable = "not-executable"
	// CodeBadCwd: the working directory does not exist.
	CodeBadCwd = "bad-cwd"
	// CodeBadRequest: the request itself is malformed (an empty command,
	// a path outside /workspace and /tmp, a special file).
	CodeBadRequest = "bad-request"
	// CodeDenied: the sandbox's own rules forbid the file operation
	// (EACCES, EPERM, EXDEV, ELOOP, EROFS).
	CodeDenied = "denied"
	// CodeIO: any other failure.
	CodeIO = "io"
	// CodeAborted: a write's upload ended before its end mark (frame.go);
	// the file was left as it was.
	CodeAborted = "aborted"
	// CodeNoResources: a command could not be started because the
	// sandbox is at its process or memory limit (fork: EAGAIN, ENOMEM).
	CodeNoResources = "no-resources"
)

// StartError is the result and error of a command that could not start,
// for a failure code and its text: exit 127 for a missing command, 126
// otherwise, as a shell reports them.
func StartError(code, text string) (sandbox.ExecResult, error) {
	switch code {
	case CodeNotFound:
		return sandbox.ExecResult{ExitCode: 127}, fmt.Errorf("%w: %s", sandbox.ErrCommandNotFound, text)
	case CodeNotExecutable, CodeBadCwd:
		return sandbox.ExecResult{ExitCode: 126}, fmt.Errorf("%w: %s", sandbox.ErrNotExecutable, text)
	case CodeNoResources:
		// Not the request's fault: the sandbox is at a limit (pids,
		// memory) for now.
		return sandbox.ExecResult{ExitCode: 126}, fmt.Errorf("%w: the command could not start: %s", sandbox.ErrSandboxLimit, text)
	}
	return sandbox.ExecResult{ExitCode: 126}, fmt.Errorf("%w: %s", sandbox.ErrInvalidRequest, text)
}

// FileErr is the error of a failed file operation, for a failure code and
// its text.
func FileErr(code, text string) error {
	base := sandbox.ErrInvalidRequest
	switch code {
	case CodeNotFound:
		base = sandbox.ErrNotFound
	case CodeDenied:
		base = sandbox.ErrPermission
	}
	return fmt.Errorf("%w: %s", base, text)
}
