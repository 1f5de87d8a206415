// Package errdefs is IronClaw's one error vocabulary: a small set of
// classes that every package's errors belong to, so that callers branch on
// what kind of failure happened (errors.Is(err, errdefs.ErrNotFound)) and
// the HTTP API renders each class in one table, never by matching text.
//
// A package keeps its own sentinels for the cases its callers tell apart
// (session.ErrNotFound, gateway.ErrConflict, ...) and declares each with New,
// which makes it belong to one class:
//
//	var ErrNotFound = errdefs.New(errdefs.ErrNotFound, "sandbox not found")
//
// errors.Is then matches both the sentinel and its class, and the message
// stays the package's own.
package errdefs

import (
	"errors"
	"syscall"
)

// The classes. Each names a caller's next move, not a cause.
var (
	// ErrInvalidArgument: the request is malformed or asks for something
	// impossible; retrying it unchanged fails again. Nothing was changed.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotFound: what the request names does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the object exists but is in a state that does not allow
	// the request (an ended sandbox, a request decided otherwise).
	ErrConflict = errors.New("conflict")
	// ErrForbidden: the caller's role or ownership does not allow this.
	ErrForbidden = errors.New("forbidden")
	// ErrTooLarge: a body, file or value is over its size limit.
	ErrTooLarge = errors.New("too large")
	// ErrLimitExceeded: a quota or capacity is used up (sandboxes per token,
	// committed host memory, pending approvals); retry after something ends.
	ErrLimitExceeded = errors.New("limit exceeded")
	// ErrUnavailable: the service cannot do it now (shutting down, a
	// dependency failed, a deadline passed); a retry may work.
	ErrUnavailable = errors.New("unavailable")
	// ErrUnsupported: this host or backend cannot provide the feature.
	ErrUnsupported = errors.New("not supported")
	// ErrInsufficientStorage: the disk holding the daemon's state is full.
	// Reads keep working; nothing half-done was left.
	ErrInsufficientStorage = errors.New("insufficient storage")
)

// Classes lists every class, in the order the API documents them.
func Classes() []error {
	return []error{ErrInvalidArgument, ErrNotFound, ErrConflict, ErrForbidden, ErrTooLarge,
		ErrLimitExceeded, ErrUnavailable, ErrUnsupported, ErrInsufficientStorage}
}

// New returns a sentinel error with its own message that belongs to class.
func New(class error, msg string) error {
	return &classed{msg: msg, class: class}
}

type classed struct {
	msg   string
	class error
}

func (e *classed) Error() string { return e.msg }
func (e *classed) Unwrap() error { return e.class }

// Class returns the class err belongs to, or nil for an unclassified error
// (which the API renders as internal). A full disk (ENOSPC, EDQUOT) is
// ErrInsufficientStorage wherever it came from.
func Class(err error) error {
	if err == nil {
		return nil
	}
	for _, c := range Classes() {
		if errors.Is(err, c) {
			return c
		}
	}
	if IsDiskFull(err) {
		return ErrInsufficientStorage
	}
	return nil
}

// IsDiskFull reports whether err is a full disk or an exhausted quota: the
// errno, or SQLite's SQLITE_FULL (13), which the store's driver reports as
// an error with a Code method.
func IsDiskFull(err error) bool {
	if errors.Is(err, ErrInsufficientStorage) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	var c interface{ Code() int }
	return errors.As(err, &c) && c.Code()&0xff == sqliteFull
}

const sqliteFull = 13
