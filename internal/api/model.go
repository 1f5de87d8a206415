package api

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
)

// mintModelToken gives an agent on the host a model-proxy token of its own
// API session: the provider key stays in the daemon, the agent's process
// holds a token that is worthless anywhere but this proxy.
func (s *Server) mintModelToken(w http.ResponseWriter, r *http.Request, who principal) error {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	session := "api-" + hex.EncodeToString(b[:])
	tok, err := s.cfg.Model.Mint(session)
	if err != nil {
		return fmt.Errorf("model proxy token: %w", err)
	}
	base := "http://" + r.Host + "/v1/model"
	writeJSON(w, http.StatusCreated, map[string]string{
		"session":            session,
		"token":              tok,
		"openai_base_url":    base + "/openai/v1",
		"anthropic_base_url": base + "/anthropic",
	})
	return nil
}
