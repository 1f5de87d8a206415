package sandbox

import "errors"

// The error vocabulary of every backend. Callers branch with errors.Is; the
// wrapped message carries the detail.
var (
	// ErrInvalidSpec: the Spec or a request is malformed; nothing was created.
	ErrInvalidSpec = errors.New("invalid sandbox spec")
	// ErrInvalidRequest: an exec or file request is malformed.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrCommandNotFound: the command's executable does not exist inside.
	ErrCommandNotFound = errors.New("command not found")
	// ErrNotExecutable: the command exists but cannot be executed.
	ErrNotExecutable = errors.New("command cannot be executed")
	// ErrClosed: the sandbox was destroyed or died.
	ErrClosed = errors.New("sandbox is closed")
	// ErrUnsupported: the host cannot provide a required isolation feature.
	ErrUnsupported = errors.New("not supported on this host")
	// ErrNotFound: a file inside the sandbox does not exist.
	ErrNotFound = errors.New("not found")
	// ErrPermission: the sandbox's own rules forbid the file operation.
	ErrPermission = errors.New("permission denied")
)
