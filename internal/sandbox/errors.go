package sandbox

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/ironclaw/ironclaw/internal/errdefs"
)

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
	// ErrSandboxLimit: a command could not start because the sandbox is at
	// one of its own limits (processes, memory); a retry after its other
	// processes end may work, or the sandbox needs higher limits.
	ErrSandboxLimit = errdefs.New(errdefs.ErrLimitExceeded, "the sandbox is at its limit")
)

// exhaustedPhrases are how runtimes and dockerd word the errnos
// HostExhausted classifies, when only their message reaches us.
var exhaustedPhrases = []struct{ phrase, out string }{
	{"resource temporarily unavailable", "processes or threads"},
	{"cannot allocate memory", "memory"},
	{"too many open files", "file descriptors"},
	{"no space left on device", "space (cgroups, inodes or disk)"},
}

// HostExhaustedText is HostExhausted for a failure known only by the
// message of another program (an OCI runtime, dockerd): it returns nil
// unless msg carries one of those errnos' words.
func HostExhaustedText(what, msg string) error {
	low := strings.ToLower(msg)
	for _, p := range exhaustedPhrases {
		if strings.Contains(low, p.phrase) {
			return fmt.Errorf("%w (%s): %s: %s", ErrHostExhausted, p.out, what, msg)
		}
	}
	return nil
}

// HostExhausted returns err wrapped in ErrHostExhausted, saying what the
// host ran out of, when err is one of the errnos that mean so (EAGAIN from
// clone or fork: processes; ENOMEM: memory; EMFILE, ENFILE: descriptors;
// ENOSPC: cgroups or disk), and nil otherwise. what says what was being
// done ("starting the sandbox init").
func HostExhausted(what string, err error) error {
	var out string
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.EAGAIN):
		out = "processes or threads"
	case errors.Is(err, syscall.ENOMEM):
		out = "memory"
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		out = "file descriptors"
	case errors.Is(err, syscall.ENOSPC):
		out = "space (cgroups, inodes or disk)"
	default:
		return nil
	}
	return fmt.Errorf("%w (%s): %s: %v", ErrHostExhausted, out, what, err)
}

// ClosedErr is ErrClosed for sandbox id once done is closed, else nil.
func ClosedErr(id string, done <-chan struct{}) error {
	select {
	case <-done:
		return fmt.Errorf("sandbox %s: %w", id, ErrClosed)
	default:
		return nil
	}
}
