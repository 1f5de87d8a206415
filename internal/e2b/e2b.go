// Package e2b serves an E2B-compatible API, so that the official E2B SDKs
// and every integration built on them (Mastra's E2BSandbox, the OpenAI
// Agents SDK's E2B client, ...) run their sandboxes on IronClaw. It is
// mounted on the daemon's listener under /e2b, and has three parts:
//
//   - control (package control): E2B's REST API, /sandboxes and friends,
//     authenticated by an E2B API key (X-API-Key);
//   - envd (package envd): the data plane E2B runs inside each sandbox
//     (Connect RPC process.Process and filesystem.Filesystem, /files),
//     served here by the daemon, since an IronClaw sandbox has no network;
//     authenticated by the sandbox's access token (X-Access-Token) or a
//     signed file URL;
//   - port previews: any other port of a sandbox, reverse-proxied through
//     the native API's port URLs (preview.go).
//
// A request is for a sandbox when it carries E2b-Sandbox-Id (the SDKs add
// it, with E2b-Sandbox-Port, whenever E2B_SANDBOX_URL is set), or when its
// Host is <port>-<id>.<domain> (ServeHost). Everything else is control.
//
// Nothing here touches a sandbox directly: every action is a call to the
// native API, in process (package inproc), made with the agent token the
// caller's key stands for (package auth). So an E2B call is authorized,
// rate limited, bounded, audited and gated exactly as the same call on
// /v1 is, and the native API stays the one place those rules live.
package e2b

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/e2b/auth"
	"github.com/ironclaw/ironclaw/internal/e2b/control"
	"github.com/ironclaw/ironclaw/internal/e2b/envd"
)

// Prefix is where the daemon mounts the API: clients set E2B_API_URL and
// E2B_SANDBOX_URL to http://HOST:PORT/e2b.
const Prefix = "/e2b"

// EnvdPort is the port E2B's SDKs address envd on.
const EnvdPort = 49983

// JupyterPort is the port of the code interpreter's Jupyter gateway
// (@e2b/code-interpreter), which IronClaw does not run.
const JupyterPort = 49999

// Config configures a Server.
type Config struct {
	// API is the native API (api.Server.Handler()), called in process.
	API http.Handler
	// Agents are the agent tokens that have E2B keys.
	Agents []auth.Agent
	// Domain, if set, is the domain of sandbox hosts: a request whose Host
	// is <port>-<id>.<Domain> is for that sandbox's port, and create and
	// connect answer it as the sandbox's domain (the SDKs build preview
	// hosts from it). Empty: only header routing.
	Domain string
	// Templates maps E2B template ids or aliases onto images the native
	// API accepts; see control.Config.
	Templates map[string]string
	// Ports are the loopback ports every sandbox created through E2B
	// declares, so its servers can be previewed; see control.Config.
	Ports []uint16
	// Logf receives diagnostics; nil discards them.
	Logf func(format string, args ...any)
}

// Server is the E2B-compatible API.
type Server struct {
	cfg     Config
	keys    *auth.Keyring
	control http.Handler
	envd    http.Handler
	preview *previews
}

// New builds a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Domain != "" && !validDomain(cfg.Domain) {
		return nil, errors.New("e2b: the domain must be a host name such as sandboxes.example.com")
	}
	keys, err := auth.NewKeyring(cfg.API, cfg.Agents)
	if err != nil {
		return nil, err
	}
	ctl, err := control.New(control.Config{Templates: cfg.Templates, Domain: cfg.Domain, Ports: cfg.Ports, Logf: cfg.Logf})
	if err != nil {
		return nil, err
	}
	return &Server{
		cfg:     cfg,
		keys:    keys,
		control: ctl,
		envd:    envd.New(envd.Config{Logf: cfg.Logf}),
		preview: newPreviews(cfg.Logf),
	}, nil
}

// Keys are the principals' credentials (the daemon writes the default
// agent's key to e2b.key).
func (s *Server) Keys() *auth.Keyring { return s.keys }

// ServeHTTP serves a request whose path has had Prefix removed.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		port := EnvdPort
		if p := r.Header.Get("E2b-Sandbox-Port"); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 65535 {
				writeError(w, http.StatusBadRequest, "E2b-Sandbox-Port must be a port number")
				return
			}
			port = n
		}
		s.sandbox(w, r, id, port)
		return
	}
	if r.URL.Path == "/health" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	p := s.keys.ByKey(apiKey(r))
	if p == nil {
		writeError(w, http.StatusUnauthorized, "a valid E2B API key (X-API-Key) is required")
		return
	}
	s.control.ServeHTTP(w, r.WithContext(auth.WithPrincipal(r.Context(), p)))
}

// HostTarget parses a Host of the form <port>-<id>.<Domain> (a port may
// follow it); ok is false for any other Host, or when no Domain is set.
func (s *Server) HostTarget(host string) (id string, port int, ok bool) {
	if s.cfg.Domain == "" {
		return "", 0, false
	}
	if h, _, found := strings.Cut(host, ":"); found {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	label, ok := strings.CutSuffix(host, "."+s.cfg.Domain)
	if !ok || strings.Contains(label, ".") {
		return "", 0, false
	}
	ps, id, ok := strings.Cut(label, "-")
	if !ok || id == "" {
		return "", 0, false
	}
	n, err := strconv.Atoi(ps)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != ps {
		return "", 0, false
	}
	return id, n, true
}

// ServeHost serves a request whose Host is a sandbox's (HostTarget); its
// path is not under Prefix.
func (s *Server) ServeHost(w http.ResponseWriter, r *http.Request, id string, port int) {
	s.sandbox(w, r, id, port)
}

func (s *Server) sandbox(w http.ResponseWriter, r *http.Request, id string, port int) {
	if !validSandboxID(id) {
		writeError(w, http.StatusBadRequest, "E2b-Sandbox-Id is not a sandbox id")
		return
	}
	ctx := auth.WithSandbox(r.Context(), id)
	if port == JupyterPort {
		writeError(w, http.StatusNotImplemented, "the code interpreter's Jupyter port (49999) is not served: IronClaw runs no Jupyter gateway; run code with commands.run instead")
		return
	}
	if port != EnvdPort {
		p := s.keys.ByTrafficToken(id, r.Header.Get("E2B-Traffic-Access-Token"))
		if p == nil {
			p = s.keys.ByAccessToken(id, r.Header.Get("X-Access-Token"))
		}
		if p == nil {
			writeError(w, http.StatusUnauthorized, "a port preview needs the sandbox's E2B-Traffic-Access-Token")
			return
		}
		s.preview.serve(w, r.WithContext(auth.WithPrincipal(ctx, p)), p, id, port)
		return
	}
	p := s.keys.ByAccessToken(id, r.Header.Get("X-Access-Token"))
	if p == nil {
		p = s.signed(r, id)
	}
	if p == nil {
		writeError(w, http.StatusUnauthorized, "the sandbox's access token (X-Access-Token) or a signed URL is required")
		return
	}
	s.envd.ServeHTTP(w, r.WithContext(auth.WithPrincipal(ctx, p)))
}

// signed authenticates a /files URL signed with the sandbox's access
// token (the SDKs' uploadUrl and downloadUrl).
func (s *Server) signed(r *http.Request, id string) *auth.Principal {
	if r.URL.Path != "/files" {
		return nil
	}
	q := r.URL.Query()
	sig := q.Get("signature")
	if sig == "" {
		return nil
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	var exp int64
	if e := q.Get("signature_expiration"); e != "" {
		n, err := strconv.ParseInt(e, 10, 64)
		if err != nil || time.Now().Unix() > n {
			return nil
		}
		exp = n
	}
	return s.keys.BySignature(id, q.Get("path"), op, q.Get("username"), exp, sig)
}

// apiKey is the request's E2B API key: X-API-Key, or a bearer token.
func apiKey(r *http.Request) string {
	if k := r.Header.Get("X-API-Key"); k != "" {
		return k
	}
	if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return t
	}
	return ""
}

// validSandboxID admits the native API's ids: 1-64 letters, digits, - and _.
func validSandboxID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func validDomain(d string) bool {
	if len(d) > 200 || strings.HasPrefix(d, ".") || strings.HasSuffix(d, ".") || !strings.Contains(d, ".") && d != "localhost" {
		return false
	}
	for _, c := range d {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// writeError writes E2B's error body, {"code": status, "message": ...}.
func writeError(w http.ResponseWriter, status int, msg string) {
	control.WriteError(w, status, msg)
}

// Close stops what the server runs in the background.
func (s *Server) Close(ctx context.Context) error { return nil }

// Mount returns a handler that serves the E2B API under Prefix and at
// sandbox hosts (HostTarget), and everything else with native.
func (s *Server) Mount(native http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, port, ok := s.HostTarget(r.Host); ok {
			s.ServeHost(w, r, id, port)
			return
		}
		if r.URL.Path == "/files" && r.URL.Query().Has("signature") {
			// The SDKs build signed file URLs as new URL('/files',
			// sandboxUrl): with E2B_SANDBOX_URL set, that drops /e2b and
			// names no sandbox. Say so instead of a bare 404.
			writeError(w, http.StatusBadRequest, "this signed E2B file URL names no sandbox: with E2B_SANDBOX_URL the SDKs build "+
				"uploadUrl/downloadUrl without it; serve sandboxes at their own hosts (ironclaw serve --e2b-domain) for signed URLs, "+
				"or send the request to "+Prefix+"/files with the E2b-Sandbox-Id header")
			return
		}
		if rest, ok := strings.CutPrefix(r.URL.Path, Prefix); ok && (rest == "" || rest[0] == '/') {
			r2 := r.Clone(r.Context())
			if rest == "" {
				rest = "/"
			}
			r2.URL.Path = rest
			r2.URL.RawPath = ""
			s.ServeHTTP(w, r2)
			return
		}
		native.ServeHTTP(w, r)
	})
}
