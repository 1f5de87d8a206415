package api

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/secrets"
)

// Secrets is the daemon's brokered secrets (package secrets' Store), as
// the operator routes use them (issue 15). Values go in and never come
// out: no route, error or record here returns one.
type Secrets interface {
	Set(ctx context.Context, actor string, m secrets.Meta, value []byte) (secrets.Meta, error)
	Remove(ctx context.Context, actor, name string) error
	List() []secrets.Meta
}

func secretView(m secrets.Meta) wire.Secret {
	return wire.Secret{Name: m.Name, Hosts: m.Hosts, Env: m.Env, Header: m.Header, Format: m.Format, Grant: m.Grant,
		Source: m.Source, Version: m.Version, UpdatedAt: m.UpdatedAt.UTC()}
}

// putSecret creates or rotates a secret; the store audits it (secret.set)
// before it acts.
func (s *Server) putSecret(w http.ResponseWriter, r *http.Request, who principal) error {
	name := r.PathValue("name")
	if err := secrets.CheckName(name); err != nil {
		return err
	}
	var b wire.SetSecretRequest
	if err := decodeJSON(s.bodyOf(w, r), &b); err != nil {
		if errors.Is(err, io.EOF) {
			return badRequest("a secret needs hosts and a value")
		}
		return err
	}
	value := []byte(b.Value)
	defer clear(value)
	b.Value = ""
	m, err := s.cfg.Secrets.Set(r.Context(), who.Name, secrets.Meta{Name: name, Hosts: b.Hosts, Env: b.Env, Header: b.Header,
		Format: b.Format, Grant: b.Grant}, value)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if m.Version == 1 {
		status = http.StatusCreated
	}
	writeJSON(w, status, secretView(m))
	return nil
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request, who principal) error {
	writeJSON(w, http.StatusOK, wire.SecretList{Secrets: views(s.cfg.Secrets.List(), secretView)})
	return nil
}

// deleteSecret removes a secret (audited first, secret.rm); sandboxes
// granted it keep a placeholder that opens nothing.
func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request, who principal) error {
	if err := s.cfg.Secrets.Remove(r.Context(), who.Name, r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
