// Package envd serves the data plane E2B runs inside each sandbox, envd,
// from the daemon, over the native API: Connect RPC process.Process and
// filesystem.Filesystem (JSON and binary codecs), GET and POST /files,
// and /health.
package envd

import "net/http"

// Config configures envd.
type Config struct {
	Logf func(format string, args ...any)
}

// New builds envd's handler. Requests reach it with auth.SandboxFrom(ctx)
// set, and auth.PrincipalFrom(ctx) set unless the request is GET /health.
func New(cfg Config) http.Handler {
	return http.NewServeMux()
}
