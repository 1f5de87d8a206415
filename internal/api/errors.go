package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/session"
)

// apiError is an error with its HTTP rendering. Its message is shown to
// the client, so it must say nothing secret.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

var errInternal = &apiError{http.StatusInternalServerError, "internal", "internal error (see the daemon's log)"}

func badRequest(msg string) error {
	return &apiError{http.StatusBadRequest, "invalid_argument", msg}
}

// classify maps any error to its rendering. Errors of the session and
// sandbox vocabularies carry messages written for the caller (ids, paths,
// field names), which are passed on; anything else is internal.
func classify(err error) *apiError {
	var ae *apiError
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &tooBig):
		return &apiError{http.StatusRequestEntityTooLarge, "too_large", "the request body is over the limit"}
	case errors.Is(err, session.ErrNotFound):
		return &apiError{http.StatusNotFound, "not_found", err.Error()}
	case errors.Is(err, session.ErrLimit):
		return &apiError{http.StatusTooManyRequests, "limit_exceeded", err.Error()}
	case errors.Is(err, sandbox.ErrInvalidSpec), errors.Is(err, sandbox.ErrInvalidRequest):
		return &apiError{http.StatusBadRequest, "invalid_argument", err.Error()}
	case errors.Is(err, sandbox.ErrPermission):
		return &apiError{http.StatusBadRequest, "invalid_argument", err.Error()}
	case errors.Is(err, sandbox.ErrNotFound):
		return &apiError{http.StatusNotFound, "not_found", err.Error()}
	case errors.Is(err, sandbox.ErrClosed):
		return &apiError{http.StatusConflict, "conflict", "the sandbox is not running"}
	case errors.Is(err, sandbox.ErrUnsupported):
		return &apiError{http.StatusServiceUnavailable, "unavailable", err.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{http.StatusServiceUnavailable, "unavailable", "the operation timed out"}
	}
	return errInternal
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, e *apiError) {
	var b errorBody
	b.Error.Code, b.Error.Message = e.code, e.message
	writeJSON(w, e.status, b)
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
