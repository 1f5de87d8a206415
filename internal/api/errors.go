package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/errdefs"
)

// apiError is an error with its HTTP rendering. Its message is shown to
// the client, so it must say nothing secret.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

var errInternal = &apiError{http.StatusInternalServerError, wire.CodeInternal, "internal error (see the daemon's log)"}

func badRequest(msg string) error {
	return &apiError{http.StatusBadRequest, wire.CodeInvalidArgument, msg}
}

// statusOf renders each error class; it is the only place where errors
// become HTTP statuses and codes. The codes are the API's contract
// (api/openapi.yaml's ErrorCode, docs/http-api.md), declared in package
// wire.
var statusOf = []struct {
	class  error
	status int
	code   string
}{
	{errdefs.ErrInvalidArgument, http.StatusBadRequest, wire.CodeInvalidArgument},
	{errdefs.ErrNotFound, http.StatusNotFound, wire.CodeNotFound},
	{errdefs.ErrConflict, http.StatusConflict, wire.CodeConflict},
	{errdefs.ErrForbidden, http.StatusForbidden, wire.CodeForbidden},
	{errdefs.ErrTooLarge, http.StatusRequestEntityTooLarge, wire.CodeTooLarge},
	{errdefs.ErrLimitExceeded, http.StatusTooManyRequests, wire.CodeLimitExceeded},
	{errdefs.ErrUnavailable, http.StatusServiceUnavailable, wire.CodeUnavailable},
	{errdefs.ErrUnsupported, http.StatusServiceUnavailable, wire.CodeUnavailable},
	{errdefs.ErrInsufficientStorage, http.StatusInsufficientStorage, wire.CodeInsufficientStorage},
}

// classify maps any error to its rendering. Classified errors carry
// messages written for the caller (ids, paths, field names), which are
// passed on; anything else is internal. A full disk is reported as such
// whatever layer met it, with a message that names no path.
func classify(err error) *apiError {
	var ae *apiError
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &tooBig):
		return &apiError{http.StatusRequestEntityTooLarge, wire.CodeTooLarge, "the request body is over the limit"}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{http.StatusServiceUnavailable, wire.CodeUnavailable, "the operation timed out"}
	}
	class := errdefs.Class(err)
	if class == errdefs.ErrInsufficientStorage && !errors.Is(err, errdefs.ErrInsufficientStorage) {
		// A raw ENOSPC or SQLITE_FULL: its text names files of the daemon.
		return &apiError{http.StatusInsufficientStorage, wire.CodeInsufficientStorage, "the daemon's disk is full; nothing was changed (reads still work)"}
	}
	for _, c := range statusOf {
		if c.class == class {
			return &apiError{c.status, c.code, err.Error()}
		}
	}
	return errInternal
}

// writeError renders e. Every 429 carries Retry-After: what the rate
// limit set (setRetryAfter), else one second (a quota: commands in flight
// end, sandboxes are destroyed; the message says which quota).
func writeError(w http.ResponseWriter, e *apiError) {
	if e.status == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
		setRetryAfter(w, time.Second)
	}
	writeJSON(w, e.status, wire.ErrorResponse{Error: wire.ErrorDetail{Code: e.code, Message: e.message}})
}

// setRetryAfter sets Retry-After to wait in whole seconds, rounded up, at
// least 1.
func setRetryAfter(w http.ResponseWriter, wait time.Duration) {
	secs := (wait + time.Second - 1) / time.Second
	w.Header().Set("Retry-After", strconv.FormatInt(max(int64(secs), 1), 10))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
