package api

import (
	"net/http"
	"time"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/modelproxy"
)

// ModelProxy is what the API needs of the model proxy.
type ModelProxy interface {
	// Handler serves the host route /v1/model/...: host tokens only.
	Handler() http.Handler
	// MintHost mints a host token of principal (capped in number per
	// principal; it expires); RevokeHost revokes one of principal's own.
	MintHost(principal string) (modelproxy.HostToken, error)
	RevokeHost(principal, session string) error
}

// modelRoutes mounts the model proxy and its token routes.
func (s *Server) modelRoutes(agent func(pattern string, h handlerFunc)) {
	agent("POST /v1/model/tokens", s.mintModelToken)
	agent("DELETE /v1/model/tokens/{session}", s.revokeModelToken)
	s.handle("/v1/model/openai/", "model", retryAfter429(http.StripPrefix("/v1/model", s.cfg.Model.Handler())))
	s.handle("/v1/model/anthropic/", "model", retryAfter429(http.StripPrefix("/v1/model", s.cfg.Model.Handler())))
}

// retryAfter429 gives every 429 of h a Retry-After (one second unless h
// set one): the model proxy's budget refusals say none of their own.
func retryAfter429(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&retryAfterWriter{ResponseWriter: w}, r)
	})
}

type retryAfterWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *retryAfterWriter) WriteHeader(code int) {
	if !w.wrote && code == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
		setRetryAfter(w, time.Second)
	}
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *retryAfterWriter) Write(p []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach Flush.
func (w *retryAfterWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// mintModelToken gives a program on the host a model-proxy token of the
// caller's own: the provider key stays in the daemon, the program holds a
// token that works only on this daemon's /v1/model route, until it
// expires, and that spends the caller's model budget. A principal's live
// tokens are capped (429 limit_exceeded past the cap).
func (s *Server) mintModelToken(w http.ResponseWriter, r *http.Request, who principal) error {
	ht, err := s.cfg.Model.MintHost(who.Name)
	if err != nil {
		return err
	}
	base := "http://" + r.Host + "/v1/model"
	writeJSON(w, http.StatusCreated, wire.ModelToken{
		Session:          ht.Session,
		Token:            ht.Token,
		ExpiresAt:        ht.ExpiresAt.UTC().Truncate(time.Second), // RFC 3339, whole seconds
		OpenAIBaseURL:    base + "/openai/v1",
		AnthropicBaseURL: base + "/anthropic",
	})
	return nil
}

// revokeModelToken revokes one of the caller's own host tokens (another
// principal's is 404, as an unknown one).
func (s *Server) revokeModelToken(w http.ResponseWriter, r *http.Request, who principal) error {
	if err := s.cfg.Model.RevokeHost(who.Name, r.PathValue("session")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
