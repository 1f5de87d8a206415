// Package envd serves the data plane E2B runs inside each sandbox, envd,
// from the daemon, over the native API: Connect RPC process.Process and
// filesystem.Filesystem (JSON and binary codecs), GET and POST /files,
// and /health.
package envd

import "net/http"

// Version is the envd version reported to the SDKs: it turns on the SDK
// features (envd/versions.ts) that this package implements, and no more.
const Version = "0.5.7"

// Config configures envd.
type Config struct {
	Logf func(format string, args ...any)
}

// New builds envd's handler. Requests reach it with auth.SandboxFrom(ctx)
// set, and auth.PrincipalFrom(ctx) set unless the request is GET /health.
func New(cfg Config) http.Handler {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	mux := http.NewServeMux()
	registerProcess(mux, cfg)
	registerFilesystem(mux, cfg)
	return mux
}
