// Package control serves E2B's control REST API (/sandboxes, /v2/sandboxes,
// /templates/aliases, ...) over the native API. Errors are E2B's bodies,
// {"code": <HTTP status>, "message": "..."}.
//
// Every handler acts through the caller's native client (auth.Principal's
// API), so the native API decides what the caller may do, and audits it;
// this package only translates. What an E2B sandbox needs beyond the native
// sandbox (its template id, its timeout action) is kept in labels under the
// e2b. prefix, which E2B metadata may not use and which no answer shows as
// metadata.
package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/e2b/auth"
)

// Config configures the control API.
type Config struct {
	// Templates maps E2B template ids or aliases onto native images (""
	// is the host-toolchain view). "base", the SDKs' default, is the
	// host-toolchain view unless mapped; any other id not here is 404.
	Templates map[string]string
	// Domain is reported as each sandbox's domain ("" reports null).
	Domain string
	// Ports are the loopback ports every sandbox created here declares
	// (native CreateSandboxRequest.ports), so its servers can be previewed;
	// a create may add its own with the metadata key ironclaw.ports.
	Ports []uint16
	Logf  func(format string, args ...any)
}

// Bounds of what this package reads itself.
const (
	// maxBody bounds a JSON request body decoded here.
	maxBody = 1 << 20
	// defaultLimit and maxLimit are E2B's page size default and maximum;
	// a larger limit is clamped.
	defaultLimit = 100
	maxLimit     = 100
	// maxMetricsIDs bounds GET /sandboxes/metrics?sandbox_ids= (E2B's
	// maxItems).
	maxMetricsIDs = 100
	// maxV1List bounds the older GET /sandboxes, which has no paging.
	maxV1List = 1000
	// maxTimeout bounds a timeout in seconds (E2B's int32).
	maxTimeout = 1<<31 - 1
)

// Labels this package keeps on the sandboxes it creates.
const (
	labelPrefix    = "e2b."
	labelTemplate  = "e2b.template"
	labelOnTimeout = "e2b.on_timeout"
	// portsKey is the metadata key a create declares further ports with
	// ("3000,5173"); it is consumed, not kept.
	portsKey = "ironclaw.ports"
)

// clientID is what the answers report as E2B's deprecated clientID.
const clientID = "ironclaw"

type server struct {
	cfg     Config
	started time.Time
}

// New builds the control API's handler. Requests reach it authenticated:
// auth.PrincipalFrom(r.Context()) is the caller.
func New(cfg Config) (http.Handler, error) {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	for id := range cfg.Templates {
		if !validTemplateID(id) {
			return nil, fmt.Errorf("e2b: template id %q: 1-128 letters, digits and . _ / : - only", id)
		}
	}
	for _, p := range cfg.Ports {
		if p < 1024 {
			return nil, fmt.Errorf("e2b: port %d: sandbox ports are 1024-65535", p)
		}
	}
	s := &server{cfg: cfg, started: time.Now().UTC()}
	mux := http.NewServeMux()
	h := func(pattern string, f func(http.ResponseWriter, *http.Request, *auth.Principal) error) {
		mux.HandleFunc(pattern, s.wrap(f))
	}
	// The SDKs since 2.4x create and connect on /v2; older ones on /.
	h("POST /sandboxes", s.create)
	h("POST /v2/sandboxes", s.create)
	h("GET /sandboxes", s.listV1)
	h("GET /v2/sandboxes", s.listV2)
	h("GET /sandboxes/metrics", s.metricsMany)
	h("GET /sandboxes/{id}", s.get)
	h("DELETE /sandboxes/{id}", s.kill)
	h("POST /sandboxes/{id}/timeout", s.setTimeout)
	h("POST /sandboxes/{id}/connect", s.connect)
	h("POST /v2/sandboxes/{id}/connect", s.connect)
	h("POST /sandboxes/{id}/pause", s.pause)
	h("POST /sandboxes/{id}/resume", s.resume)
	h("GET /sandboxes/{id}/metrics", s.metrics)
	h("GET /templates", s.listTemplates)
	h("GET /templates/aliases/{alias}", s.alias)
	for _, p := range []string{"POST /templates", "POST /v2/templates", "POST /v3/templates", "POST /templates/{id}",
		"PATCH /templates/{id}", "POST /templates/{id}/builds/{build}", "POST /v2/templates/{id}/builds/{build}",
		"POST /templates/tags"} {
		h(p, s.noBuilds)
	}
	h("POST /volumes", s.createVolume)
	h("GET /volumes", s.listVolumes)
	h("GET /volumes/{id}", s.getVolume)
	h("DELETE /volumes/{id}", s.deleteVolume)
	h("POST /sandboxes/{id}/snapshots", s.snapshot)
	h("GET /snapshots", s.listSnapshots)
	h("DELETE /templates/{id}", s.deleteTemplate)
	for _, p := range []string{"POST /sandboxes/{id}/fork",
		"PUT /sandboxes/{id}/network", "POST /sandboxes/{id}/refreshes", "GET /sandboxes/{id}/logs", "GET /v2/sandboxes/{id}/logs"} {
		h(p, s.notServed)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusNotFound, "no such route: "+r.Method+" "+r.URL.Path)
	})
	return mux, nil
}

// wrap runs a handler as the request's principal and renders its error.
func (s *server) wrap(f func(http.ResponseWriter, *http.Request, *auth.Principal) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := auth.PrincipalFrom(r.Context())
		if p == nil {
			WriteError(w, http.StatusUnauthorized, "a valid E2B API key (X-API-Key) is required")
			return
		}
		if err := f(w, r, p); err != nil {
			s.fail(w, r, err)
		}
	}
}

// httpError is an answer decided here.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return &httpError{status, fmt.Sprintf(format, args...)}
}

// fail renders err: the native API's errors keep their status and
// message (E2B's SDKs read 400, 401, 403, 404, 409, 429 and 5xx alike).
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	var ce *client.Error
	switch {
	case errors.As(err, &he):
		WriteError(w, he.status, he.msg)
	case errors.As(err, &ce):
		status := ce.Status
		if status < 400 || status > 599 {
			status = http.StatusBadGateway
		}
		if status >= 500 {
			s.cfg.Logf("e2b: %s %s: %v", r.Method, r.URL.Path, err)
		}
		WriteError(w, status, ce.Message)
	default:
		s.cfg.Logf("e2b: %s %s: %v", r.Method, r.URL.Path, err)
		WriteError(w, http.StatusInternalServerError, "internal error (see the daemon's log)")
	}
}

// decode reads a JSON body of at most maxBody bytes into v; an empty body
// leaves v as it is unless required. Unknown members are ignored, as the
// SDKs send members of newer API versions.
func decode(w http.ResponseWriter, r *http.Request, v any, required bool) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	err := dec.Decode(v)
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF) && !required:
		return nil
	case errors.Is(err, io.EOF):
		return errorf(http.StatusBadRequest, "a JSON body is required")
	case errors.As(err, &tooBig):
		return errorf(http.StatusRequestEntityTooLarge, "the body is larger than %d bytes", maxBody)
	default:
		return errorf(http.StatusBadRequest, "malformed JSON: %v", err)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
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

// validTemplateID admits template ids and aliases an operator may map:
// 1-128 bytes of letters, digits and . _ / : -.
func validTemplateID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._/:-", c)) {
			return false
		}
	}
	return true
}

// template resolves a template id or alias to a native image.
func (s *server) template(id string) (image string, ok bool) {
	if img, ok := s.cfg.Templates[id]; ok {
		return img, true
	}
	if id == "base" {
		return "", true
	}
	return "", false
}

// templateIDs lists the ids a create accepts, sorted.
func (s *server) templateIDs() []string {
	ids := []string{}
	for id := range s.cfg.Templates {
		ids = append(ids, id)
	}
	if _, ok := s.cfg.Templates["base"]; !ok {
		ids = append(ids, "base")
	}
	slices.Sort(ids)
	return ids
}
