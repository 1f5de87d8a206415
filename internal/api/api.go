// Package api serves IronClaw's HTTP API (docs/http-api.md): sandboxes,
// exec (streamed as NDJSON), files and, for the operator, the audit log,
// plus /healthz and Prometheus /metrics.
//
// The API is described in api/openapi.yaml, and held to it by tests: the
// routes and their roles (routes_test.go), and every answer the tests read
// (helpers_test.go checks each against the document). Request and answer
// bodies are package wire's types, shared with the Go client; views.go
// turns the domain objects into them.
//
// Every handler returns an error; writeError maps it to a status and the
// contract's {"error":{"code","message"}} body. Decisions the contract
// leaves open, made here:
//
//   - A path the sandbox refuses (sandbox.ErrPermission, e.g. a symlink
//     that points out of /workspace) is 400 invalid_argument, like any
//     other bad path; 403 stays reserved for a token of the wrong role.
//   - An exec or file request on a sandbox that exists but has ended is 409
//     conflict; an unknown id is 404.
//   - GET /v1/audit clamps limit to 1000 instead of refusing larger values.
//   - An exec that fails after its stream began (the sandbox died under
//     it) ends with {"exit": -1, "error": "..."}.
//   - A file download that fails after its first byte aborts the
//     connection, so the client sees a truncated body, not a short file.
//   - Requests without a valid token are not rate limited (they are
//     rejected before any work is done).
package api

import (
	"context"
	"errors"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/metrics"
	"github.com/ironclaw/ironclaw/internal/session"
)

// Config configures a Server.
type Config struct {
	// AgentToken and OperatorToken are the bearer tokens of the two roles;
	// both are required, and they must differ.
	AgentToken, OperatorToken string
	// MaxBodyBytes bounds JSON request bodies; 0 means 1 MiB.
	MaxBodyBytes int64
	// MaxUploadBytes bounds file uploads; 0 means 256 MiB.
	MaxUploadBytes int64
	// RatePerSecond and RateBurst shape the token bucket each principal
	// (token) gets; SandboxRatePerSecond and SandboxRateBurst the one each
	// running sandbox gets, which its routes (/v1/sandboxes/{id}/...) take
	// from as well. RateBuckets bounds the sandbox buckets held at once.
	// 0 means the defaults package's value.
	RatePerSecond        float64
	RateBurst            int
	SandboxRatePerSecond float64
	SandboxRateBurst     int
	RateBuckets          int
	// Logf receives diagnostics (never a token); nil discards them.
	Logf func(format string, args ...any)
	// Model, if set, is the model proxy: mounted at /v1/model/ (prefix
	// stripped; it authenticates its own host tokens, never the API
	// tokens nor sandboxes' tokens), and POST /v1/model/tokens lets a
	// principal mint one for a program that runs on the host (model.go).
	Model ModelProxy
	// Operators are further operator tokens, each with the name recorded
	// as the decider of the approvals it decides. OperatorToken's name is
	// "operator".
	Operators []Operator
	// Agents are further agent tokens, each a principal of its own
	// ("agent:NAME"): it sees only the sandboxes and approvals it made, and
	// has its own quotas and rate. AgentToken is the principal "agent".
	Agents []Agent
	// Gateway, if set, enables the approval routes and the privileged
	// actions (tools, agents, widening), and Policy marks commands that
	// need approval.
	Gateway Gateway
	Policy  ExecPolicy
	// EgressCovers reports whether an egress rule is already allowed for
	// every sandbox; a create asking for other hosts files a widen request.
	EgressCovers func(rule string) bool
	// Tools lists registered tools for GET /v1/tools.
	Tools ToolLister
	// Volumes, if set, serves /v1/volumes (volumes.go).
	Volumes Volumes
	// Secrets, if set, serves the operator's /v1/secrets (secrets.go).
	Secrets Secrets
	// Ports, if set, issues port URLs and tunnels (ports.go); nil answers
	// 403 (policy ports.inbound is off).
	Ports *Ports
	// Console, if set, is served at /ui/ (static files; data needs a token).
	Console http.Handler
	// Ceiling, if set, holds agents' creates to the operator's ceilings
	// (policy limits.max); what they ask beyond is filed as a widening.
	Ceiling *Ceiling
	// WaitOutputBytes bounds the output an exec with ?wait=1 returns (it is
	// held in the daemon's memory until the command ends); the rest is
	// dropped and reported as truncated. 0 means 1 MiB.
	WaitOutputBytes int64
	// BodyTimeout bounds how long a JSON request body may take to arrive,
	// and how long an upload may stall; 0 means 30 seconds.
	BodyTimeout time.Duration
}

// Operator is a named operator token.
type Operator struct {
	Name, Token string
}

// Agent is a named agent token.
type Agent struct {
	Name, Token string
}

// Server is the HTTP API over one session.Manager and audit.Log.
type Server struct {
	cfg     Config
	m       *session.Manager
	log     *audit.Log
	tokens  []principalHash // hashes of every token, compared in constant time
	limiter *limiter
	inbound inbound // open inbound connections (ports.go)
	metrics *apiMetrics
	reg     *metrics.Registry // what /metrics serves
	mux     *http.ServeMux
	handler http.Handler
	// routes lists what register mounted, for the test that holds them
	// to the API's description (api/openapi.yaml).
	routes []route
}

// route is one registered pattern and the role it needs: roleAgent,
// roleOperator, "model" (the model proxy's own tokens) or "none".
type route struct {
	pattern, role string
}

// New checks cfg and builds a Server. Its metrics are registered on reg,
// which /metrics serves (with whatever else the caller registered there);
// nil means a private registry.
func New(cfg Config, m *session.Manager, log *audit.Log, reg *metrics.Registry) (*Server, error) {
	if cfg.AgentToken == "" || cfg.OperatorToken == "" {
		return nil, errors.New("api: the agent and operator tokens are required")
	}
	tokens, err := hashTokens(cfg)
	if err != nil {
		return nil, err
	}
	if m == nil || log == nil {
		return nil, errors.New("api: a session manager and an audit log are required")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = defaults.MaxBodyBytes
	}
	if cfg.MaxUploadBytes <= 0 {
		cfg.MaxUploadBytes = defaults.MaxUploadBytes
	}
	if cfg.WaitOutputBytes <= 0 {
		cfg.WaitOutputBytes = defaults.WaitOutputBytes
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = defaults.BodyTimeout
	}
	if cfg.RatePerSecond <= 0 {
		cfg.RatePerSecond = defaults.RatePerSecond
	}
	if cfg.RateBurst <= 0 {
		cfg.RateBurst = defaults.RateBurst
	}
	if cfg.SandboxRatePerSecond <= 0 {
		cfg.SandboxRatePerSecond = defaults.SandboxRatePerSecond
	}
	if cfg.SandboxRateBurst <= 0 {
		cfg.SandboxRateBurst = defaults.SandboxRateBurst
	}
	if cfg.RateBuckets <= 0 {
		cfg.RateBuckets = defaults.RateBuckets
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if reg == nil {
		reg = metrics.NewRegistry()
	}
	met, err := newMetrics(reg, m)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, m: m, log: log,
		tokens: tokens,
		limiter: newLimiter(rateShape{cfg.RatePerSecond, cfg.RateBurst},
			rateShape{cfg.SandboxRatePerSecond, cfg.SandboxRateBurst}, cfg.RateBuckets),
		metrics: met,
		reg:     reg,
		mux:     http.NewServeMux(),
	}
	s.register()
	s.handler = http.HandlerFunc(s.serve)
	return s, nil
}

// Handler returns the API's root handler.
func (s *Server) Handler() http.Handler { return s.handler }

// OnEnd counts a sandbox's end; the daemon wires session.Options.OnEnd to
// it.
func (s *Server) OnEnd(id, state, reason string) { s.metrics.ended(state, reason) }

// handlerFunc is what every API handler is: it writes a success itself and
// returns an error for writeError to render. who is the caller.
type handlerFunc func(w http.ResponseWriter, r *http.Request, who principal) error

// handle registers h for pattern, needing role.
func (s *Server) handle(pattern, role string, h http.Handler) {
	s.routes = append(s.routes, route{pattern, role})
	s.mux.Handle(pattern, h)
}

// register mounts every route. Each is described in api/openapi.yaml
// (routes_test.go checks both ways).
func (s *Server) register() {
	agent := func(pattern string, h handlerFunc) { s.handle(pattern, roleAgent, s.authed(roleAgent, h)) }
	oper := func(pattern string, h handlerFunc) { s.handle(pattern, roleOperator, s.authed(roleOperator, h)) }
	agent("POST /v1/sandboxes", s.createSandbox)
	agent("GET /v1/sandboxes", s.listSandboxes)
	agent("GET /v1/sandboxes/{id}", s.getSandbox)
	agent("DELETE /v1/sandboxes/{id}", s.deleteSandbox)
	agent("POST /v1/sandboxes/{id}/pause", s.pauseSandbox)
	agent("POST /v1/sandboxes/{id}/resume", s.resumeSandbox)
	agent("POST /v1/sandboxes/{id}/lifetime", s.setLifetime)
	agent("GET /v1/sandboxes/{id}/stats", s.sandboxStats)
	agent("POST /v1/sandboxes/{id}/snapshots", s.createSnapshot)
	agent("GET /v1/snapshots", s.listSnapshots)
	agent("GET /v1/snapshots/{id}", s.getSnapshot)
	agent("DELETE /v1/snapshots/{id}", s.deleteSnapshot)
	agent("POST /v1/sandboxes/{id}/exec", s.exec)
	agent("PUT /v1/sandboxes/{id}/files", s.putFile)
	agent("GET /v1/sandboxes/{id}/files", s.getFile)
	agent("POST /v1/sandboxes/{id}/ports", s.openPort)
	agent("GET /v1/sandboxes/{id}/ports/{port}/connect", s.connectPort)
	if s.cfg.Volumes != nil {
		agent("POST /v1/volumes", s.createVolume)
		agent("GET /v1/volumes", s.listVolumes)
		agent("GET /v1/volumes/{name}", s.getVolume)
		agent("DELETE /v1/volumes/{name}", s.deleteVolume)
	}
	s.processRoutes(agent)
	if s.cfg.Secrets != nil {
		oper("PUT /v1/secrets/{name}", s.putSecret)
		oper("GET /v1/secrets", s.listSecrets)
		oper("DELETE /v1/secrets/{name}", s.deleteSecret)
	}
	oper("GET /v1/audit", s.auditTail)
	oper("GET /v1/audit/verify", s.auditVerify)
	oper("GET /v1/audit/export", s.auditExport)
	if s.cfg.Model != nil {
		s.modelRoutes(agent)
	}
	if s.cfg.Gateway != nil {
		agent("POST /v1/approvals", s.fileApproval)
		agent("GET /v1/approvals", s.listApprovals)
		agent("GET /v1/approvals/{id}", s.getApproval)
		oper("POST /v1/approvals/{id}/approve", s.decide(true))
		oper("POST /v1/approvals/{id}/deny", s.decide(false))
		agent("POST /v1/tools", s.registerTool)
		agent("GET /v1/tools", s.listTools)
		agent("POST /v1/agents", s.spawnAgent)
		agent("POST /v1/sandboxes/{id}/egress", s.widenEgress)
		agent("POST /v1/sandboxes/{id}/limits", s.widenLimits)
	}
	if s.cfg.Console != nil {
		s.handle("GET /ui/", "none", s.cfg.Console)
		s.handle("GET /ui", "none", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	}
	s.handle("GET /healthz", "none", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, wire.Health{OK: true})
	}))
	s.handle("GET /metrics", "none", s.reg)
}

// serve is the outermost layer: panic recovery, the request counter, and
// JSON bodies for the mux's own 404 and 405.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w}
	h, pattern := s.mux.Handler(r)
	route := pattern
	if route == "" {
		route = "unmatched"
	}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				s.metrics.request(route, sw.code())
				panic(v)
			}
			s.cfg.Logf("api: panic serving %s %s: %v\n%s", r.Method, route, v, debug.Stack())
			if !sw.wrote {
				writeError(sw, errInternal)
			}
		}
		s.metrics.request(route, sw.code())
	}()
	if pattern == "" {
		s.unmatched(sw, r, h)
		return
	}
	// Through the mux again (not h) so the request gets its path values.
	s.mux.ServeHTTP(sw, r)
}

// unmatched runs the mux's fallback handler into a recorder and turns its
// 404 or 405 into the contract's JSON error; anything else (a redirect to
// the clean path) is passed through.
func (s *Server) unmatched(w http.ResponseWriter, r *http.Request, h http.Handler) {
	rec := &recorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	switch rec.status {
	case http.StatusNotFound:
		writeError(w, &apiError{http.StatusNotFound, wire.CodeNotFound, "no such route: " + r.Method + " " + r.URL.Path})
	case http.StatusMethodNotAllowed:
		if allow := rec.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		writeError(w, &apiError{http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "method " + r.Method + " is not allowed here"})
	default:
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body)
	}
}

// authed checks the bearer token and the role, applies the rate limits
// (limit), runs h and renders its error.
func (s *Server) authed(need string, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who, ok := s.principal(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ironclaw"`)
			writeError(w, &apiError{http.StatusUnauthorized, wire.CodeUnauthorized, "a valid bearer token is required"})
			return
		}
		if need == roleOperator && who.Role != roleOperator {
			writeError(w, &apiError{http.StatusForbidden, wire.CodeForbidden, "this route needs the operator token"})
			return
		}
		if err, wait := s.limit(r, who); err != nil {
			setRetryAfter(w, wait)
			writeError(w, err)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), principalKey{}, who))
		if err := h(w, r, who); err != nil {
			s.fail(w, r, err)
		}
	})
}

// limit takes the request's tokens from its principal's bucket and, on a
// route of one sandbox, from that sandbox's bucket, or returns the 429 to
// answer. A sandbox has a bucket only while it runs and only for a caller
// that may use it: an unknown, ended or foreign id makes none (its request
// is charged to the principal alone, and the handler answers 404 or 409).
func (s *Server) limit(r *http.Request, who principal) (*apiError, time.Duration) {
	sandbox := ""
	if id := r.PathValue("id"); id != "" && strings.Contains(r.Pattern, " /v1/sandboxes/{id}") {
		if info, err := s.sandboxOf(r.Context(), who, id); err == nil && info.State == session.StateRunning {
			sandbox = id
		}
	}
	ok, wait, which := s.limiter.allow(who.Name, sandbox)
	if ok {
		return nil, 0
	}
	msg := "too many requests for this token; retry later"
	if which == limitSandbox {
		msg = "too many requests for sandbox " + sandbox + "; retry later"
	}
	return &apiError{http.StatusTooManyRequests, wire.CodeRateLimited, msg}, wait
}

// fail renders err unless the response has begun (a stream), in which
// case it can only be logged.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	ae := classify(err)
	if ae == errInternal || ae.status >= 500 {
		s.cfg.Logf("api: %s %s: %v", r.Method, r.URL.Path, err)
	}
	if sw, ok := w.(*statusWriter); ok && sw.wrote {
		return
	}
	if r.Context().Err() != nil && ae == errInternal {
		// The client went away; nobody reads this response.
		ae = &apiError{http.StatusServiceUnavailable, wire.CodeUnavailable, "request cancelled"}
	}
	writeError(w, ae)
}

// statusWriter remembers the status written, for the metrics and for
// fail; Unwrap lets http.ResponseController reach Flush.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) code() string {
	if !w.wrote {
		return "200"
	}
	return strconv.Itoa(w.status)
}

// recorder captures the mux's fallback response.
type recorder struct {
	header http.Header
	status int
	body   []byte
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if len(r.body) < 64<<10 {
		r.body = append(r.body, p...)
	}
	return len(p), nil
}
