// Package auth holds the E2B-compatible API's credentials: the API keys
// (E2B's e2b_<hex> form) and the per-sandbox envd access tokens, both
// derived from the native API's agent tokens, so they need no storage,
// survive a restart and change when the agent token is rotated. A key is
// one agent principal: every call made with it is made to the native API
// with that agent's token (package inproc), so roles, ownership, quotas,
// rate limits, audit records and approvals are the native API's own.
package auth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/inproc"
)

// Agent is one agent token of the native API and the name of its
// principal ("agent", or the NAME of agents/NAME.token).
type Agent struct {
	Name, Token string
}

// Principal is an authenticated E2B caller: the agent it stands for and a
// client of the native API that calls with that agent's token.
type Principal struct {
	Name string
	API  *client.Client
	// token is the agent token: the secret every derived credential is
	// keyed with.
	token string
}

// Key is the principal's E2B API key.
func (p *Principal) Key() string { return APIKey(p.token) }

// AccessToken is the envd access token of the principal's sandbox id.
func (p *Principal) AccessToken(sandboxID string) string { return accessToken(p.token, sandboxID) }

// TrafficToken is the token a port preview of the sandbox id asks for
// (E2B-Traffic-Access-Token).
func (p *Principal) TrafficToken(sandboxID string) string {
	return derive(p.token, "traffic", sandboxID)
}

// APIKey is the E2B API key of an agent token: "e2b_" and 40 hex digits
// (the official SDKs refuse keys not of the form e2b_<hex>).
func APIKey(agentToken string) string { return "e2b_" + derive(agentToken, "api key", "") }

func accessToken(agentToken, sandboxID string) string { return derive(agentToken, "envd", sandboxID) }

// AccessTokenFor is the envd access token of sandboxID for the agent
// token agentToken (what Principal.AccessToken answers).
func AccessTokenFor(agentToken, sandboxID string) string { return accessToken(agentToken, sandboxID) }

// derive is HMAC-SHA256 keyed with the agent token over a purpose and a
// subject, as 40 hex digits: one-way, so no derived credential reveals the
// agent token or another credential.
func derive(agentToken, purpose, subject string) string {
	m := hmac.New(sha256.New, []byte(agentToken))
	m.Write([]byte("ironclaw e2b v1\x00" + purpose + "\x00" + subject))
	return hex.EncodeToString(m.Sum(nil)[:20])
}

// Keyring maps credentials onto principals.
type Keyring struct {
	principals []*Principal
	byKey      map[[32]byte]*Principal // sha256 of the API key
}

// NewKeyring builds the principals of agents; each calls the native API
// through api, in this process.
func NewKeyring(api http.Handler, agents []Agent) (*Keyring, error) {
	if api == nil {
		return nil, errors.New("e2b: the native API handler is required")
	}
	k := &Keyring{byKey: map[[32]byte]*Principal{}}
	hc := &http.Client{Transport: &inproc.Transport{Handler: api, RemoteAddr: "e2b"}}
	for _, a := range agents {
		if a.Name == "" || a.Token == "" {
			return nil, errors.New("e2b: an agent needs a name and a token")
		}
		p := &Principal{Name: a.Name, token: a.Token,
			API: &client.Client{Addr: "http://ironclaw.inproc", Token: a.Token, DataDir: "/nonexistent", HTTPClient: hc}}
		h := sha256.Sum256([]byte(p.Key()))
		if _, dup := k.byKey[h]; dup {
			return nil, errors.New("e2b: two agents share a token")
		}
		k.byKey[h] = p
		k.principals = append(k.principals, p)
	}
	return k, nil
}

// Principals lists every principal, in the order given.
func (k *Keyring) Principals() []*Principal { return k.principals }

// ByKey is the principal of an API key, or nil.
func (k *Keyring) ByKey(key string) *Principal {
	p := k.byKey[sha256.Sum256([]byte(key))]
	if p == nil || subtle.ConstantTimeCompare([]byte(p.Key()), []byte(key)) != 1 {
		return nil
	}
	return p
}

// ByAccessToken is the principal whose envd access token for sandboxID is
// token, or nil.
func (k *Keyring) ByAccessToken(sandboxID, token string) *Principal {
	if token == "" {
		return nil
	}
	var found *Principal
	for _, p := range k.principals {
		if subtle.ConstantTimeCompare([]byte(p.AccessToken(sandboxID)), []byte(token)) == 1 {
			found = p
		}
	}
	return found
}

// ByTrafficToken is the principal whose preview token for sandboxID is
// token, or nil.
func (k *Keyring) ByTrafficToken(sandboxID, token string) *Principal {
	if token == "" {
		return nil
	}
	var found *Principal
	for _, p := range k.principals {
		if subtle.ConstantTimeCompare([]byte(p.TrafficToken(sandboxID)), []byte(token)) == 1 {
			found = p
		}
	}
	return found
}

// Signature is E2B's signature of a file URL: "v1_" and the unpadded
// standard base64 of sha256("<path>:<operation>:<user>:<access token>"),
// with ":<expiry unix seconds>" appended when the URL expires (expiry 0:
// never). Operation is "read" or "write".
func Signature(path, operation, user, accessToken string, expiry int64) string {
	s := path + ":" + operation + ":" + user + ":" + accessToken
	if expiry != 0 {
		s += ":" + strconv.FormatInt(expiry, 10)
	}
	sum := sha256.Sum256([]byte(s))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

// BySignature is the principal whose access token for sandboxID signed
// (path, operation, user, expiry) as sig, or nil. The caller checks that
// the expiry has not passed.
func (k *Keyring) BySignature(sandboxID, path, operation, user string, expiry int64, sig string) *Principal {
	if !strings.HasPrefix(sig, "v1_") {
		return nil
	}
	var found *Principal
	for _, p := range k.principals {
		want := Signature(path, operation, user, p.AccessToken(sandboxID), expiry)
		if subtle.ConstantTimeCompare([]byte(want), []byte(sig)) == 1 {
			found = p
		}
	}
	return found
}

type principalKey struct{}
type sandboxKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom is the principal the request was authenticated as; nil
// when none (a handler outside authentication: a bug, so it refuses).
func PrincipalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// WithSandbox returns ctx carrying the sandbox id an envd request is for.
func WithSandbox(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, sandboxKey{}, id)
}

// SandboxFrom is the sandbox id an envd request is for ("" when none).
func SandboxFrom(ctx context.Context) string {
	s, _ := ctx.Value(sandboxKey{}).(string)
	return s
}
