// Package envd serves the data plane E2B runs inside each sandbox, envd,
// from the daemon, over the native API: Connect RPC process.Process and
// filesystem.Filesystem (JSON and binary codecs), GET and POST /files,
// and /health.
package envd

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/e2b/auth"
)

// Version is the envd version reported to the SDKs: it turns on the SDK
// features (envd/versions.ts) that this package implements, and no more.
const Version = "0.5.7"

// Config configures envd.
type Config struct {
	Logf func(format string, args ...any)
}

// New builds envd's handler. Requests reach it authenticated:
// auth.SandboxFrom(ctx) and auth.PrincipalFrom(ctx) are set.
func New(cfg Config) http.Handler {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	mux := http.NewServeMux()
	registerProcess(mux, cfg)
	registerFilesystem(mux, cfg)
	mux.HandleFunc("GET /health", health)
	return mux
}

// health is envd's liveness answer: 204 while the sandbox runs (or is
// paused: its next request resumes it), 502 once it ended or for a
// sandbox the caller cannot see, which the SDKs read as "sandbox gone"
// (isRunning answers false).
func health(w http.ResponseWriter, r *http.Request) {
	api, id, err := caller(r.Context())
	if err != nil {
		filesError(w, http.StatusUnauthorized, err.Error())
		return
	}
	sb, err := api.GetSandbox(r.Context(), id)
	switch {
	case err == nil && (sb.State == "running" || sb.State == "paused"):
		w.WriteHeader(http.StatusNoContent)
	case err == nil:
		filesError(w, http.StatusBadGateway, "sandbox "+id+" is "+sb.State)
	case client.IsCode(err, wire.CodeNotFound):
		filesError(w, http.StatusBadGateway, "sandbox "+id+" not found")
	default:
		filesError(w, http.StatusServiceUnavailable, err.Error())
	}
}

// caller is the principal and sandbox of a request.
func caller(ctx context.Context) (*client.Client, string, error) {
	p, id := auth.PrincipalFrom(ctx), auth.SandboxFrom(ctx)
	if p == nil || p.API == nil || id == "" {
		return nil, "", connect.NewError(connect.CodeUnauthenticated, errors.New("envd: not authenticated"))
	}
	return p.API, id, nil
}
