// Package control serves E2B's control REST API (/sandboxes, /v2/sandboxes,
// /templates/aliases, ...) over the native API. Errors are E2B's bodies,
// {"code": <HTTP status>, "message": "..."}.
package control

import (
	"encoding/json"
	"net/http"
)

// Config configures the control API.
type Config struct {
	// Templates maps E2B template ids or aliases onto native images.
	Templates map[string]string
	// Domain is reported as each sandbox's domain ("" reports null).
	Domain string
	Logf   func(format string, args ...any)
}

// New builds the control API's handler. Requests reach it authenticated:
// auth.PrincipalFrom(r.Context()) is the caller.
func New(cfg Config) (http.Handler, error) {
	mux := http.NewServeMux()
	return mux, nil
}

// WriteError writes E2B's error body.
func WriteError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status, msg})
}
