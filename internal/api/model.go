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
	s.handle("/v1/model/openai/", "model", http.StripPrefix("/v1/model", s.cfg.Model.Handler()))
	s.handle("/v1/model/anthropic/", "model", http.StripPrefix("/v1/model", s.cfg.Model.Handler()))
}

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
