package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/ironclaw/ironclaw/internal/api/wire"
)

// Secret is a brokered secret's metadata; the daemon never returns a
// value.
type Secret = wire.Secret

// SecretSettings are a secret's settings besides its value; empty members
// take the daemon's defaults.
type SecretSettings struct {
	Hosts  []string
	Env    string
	Header string
	Format string
	Grant  string // "ask" (default) or "all"
}

func secretPath(name string) string { return "/v1/secrets/" + url.PathEscape(name) }

// SetSecret creates or rotates a secret (operator). The value goes in the
// request body only.
func (c *Client) SetSecret(ctx context.Context, name string, s SecretSettings, value []byte) (Secret, error) {
	var out Secret
	err := c.doJSON(ctx, operator, http.MethodPut, secretPath(name), nil, wire.SetSecretRequest{
		Hosts: s.Hosts, Env: s.Env, Header: s.Header, Format: s.Format, Grant: s.Grant, Value: string(value)}, &out)
	return out, err
}

// ListSecrets lists the secrets' metadata (operator).
func (c *Client) ListSecrets(ctx context.Context) ([]Secret, error) {
	var out wire.SecretList
	err := c.doJSON(ctx, operator, http.MethodGet, "/v1/secrets", nil, nil, &out)
	return out.Secrets, err
}

// RemoveSecret removes a secret (operator).
func (c *Client) RemoveSecret(ctx context.Context, name string) error {
	return c.doJSON(ctx, operator, http.MethodDelete, secretPath(name), nil, nil, nil)
}
