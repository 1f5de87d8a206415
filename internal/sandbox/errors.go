package sandbox

import "github.com/ironclaw/ironclaw/internal/errdefs"

// The error vocabulary of every backend. Callers branch with errors.Is; the
// wrapped message carries the detail.
var (
	// ErrInvalidSpec: the Spec or a request is malformed; nothing was created.
	ErrInvalidSpec = errdefs.New(errdefs.ErrInvalidArgument, "invalid sandbox spec")
	// ErrInvalidRequest: an exec or file request is malformed.
	ErrInvalidRequest = errdefs.New(errdefs.ErrInvalidArgument, "invalid request")
	// ErrCommandNotFound: the command's executable does not exist inside.
	ErrCommandNotFound = errdefs.New(errdefs.ErrNotFound, "command not found")
	// ErrNotExecutable: the command exists but cannot be executed.
	ErrNotExecutable = errdefs.New(errdefs.ErrInvalidArgument, "command cannot be executed")
	// ErrClosed: the sandbox was destroyed or died.
	ErrClosed = errdefs.New(errdefs.ErrConflict, "sandbox is closed")
	// ErrUnsupported: the host cannot provide a required isolation feature.
	ErrUnsupported = errdefs.New(errdefs.ErrUnsupported, "not supported on this host")
	// ErrNotFound: a file inside the sandbox does not exist.
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "not found")
	// ErrPermission: the sandbox's own rules forbid the file operation.
	ErrPermission = errdefs.New(errdefs.ErrInvalidArgument, "permission denied")
	// ErrHostExhausted: the host ran out of something the sandbox needs
	// (processes, memory, descriptors, disk); nothing is wrong with the
	// request, and a retry after other sandboxes end may work.
	ErrHostExhausted = errdefs.New(errdefs.ErrUnavailable, "the host is out of resources")
)
