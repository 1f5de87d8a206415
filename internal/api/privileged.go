package api

import (
	"encoding/json"
	"io"
	"net/http"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/gateway"
	"github.com/ironclaw/ironclaw/internal/gateway/kinds"
)

// The privileged routes file requests of the kinds that have a route of
// their own. Their bodies are decoded and validated by package kinds, and
// the gateway stores the validated payload; the daemon's action decodes
// that stored payload again, so what runs is exactly what the operator
// was shown.

// readBody reads a privileged request's JSON body, bounded.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return io.ReadAll(s.bodyOf(w, r))
}

// fileKind files a request of kind for data and answers 202.
func (s *Server) fileKind(w http.ResponseWriter, r *http.Request, who principal, kind, session string, data []byte) error {
	p, err := kinds.Decode(kind, data)
	if err != nil {
		return err
	}
	if session != "" {
		if err := s.runningSandbox(r.Context(), who, session); err != nil {
			return err
		}
	}
	a, err := s.cfg.Gateway.File(r.Context(), gateway.Request{Kind: kind, Session: session, By: who.Name, Data: p,
		Join: kind == gateway.KindSandboxWiden})
	if err != nil {
		return gatewayError(err)
	}
	pending(w, a)
	return nil
}

// registerTool is POST /v1/tools: a tool.register request.
func (s *Server) registerTool(w http.ResponseWriter, r *http.Request, who principal) error {
	raw, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	return s.fileKind(w, r, who, gateway.KindToolRegister, "", raw)
}

// spawnAgent is POST /v1/agents: an agent.spawn request.
func (s *Server) spawnAgent(w http.ResponseWriter, r *http.Request, who principal) error {
	raw, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	return s.fileKind(w, r, who, gateway.KindAgentSpawn, "", raw)
}

// widenEgress is POST /v1/sandboxes/{id}/egress {"allow": [...]}: a
// sandbox.widen request for more egress rules.
func (s *Server) widenEgress(w http.ResponseWriter, r *http.Request, who principal) error {
	var b wire.EgressAllow
	if err := decodeJSON(s.bodyOf(w, r), &b); err != nil {
		if err == io.EOF {
			return badRequest(`empty body: {"allow": [...]} is required`)
		}
		return err
	}
	if len(b.Allow) == 0 || len(b.Allow) > kinds.MaxWidenRules {
		return badRequest("allow must list 1-64 rules")
	}
	data, err := json.Marshal(kinds.SandboxWiden{EgressAllow: b.Allow})
	if err != nil {
		return err
	}
	return s.fileKind(w, r, who, gateway.KindSandboxWiden, r.PathValue("id"), data)
}

// widenLimits is POST /v1/sandboxes/{id}/limits: a sandbox.widen request
// for larger limits or a longer life (kinds.WidenLimits).
func (s *Server) widenLimits(w http.ResponseWriter, r *http.Request, who principal) error {
	raw, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	l, err := kinds.DecodeWidenLimits(raw)
	if err != nil {
		return err
	}
	data, err := json.Marshal(kinds.SandboxWiden{Limits: l})
	if err != nil {
		return err
	}
	return s.fileKind(w, r, who, gateway.KindSandboxWiden, r.PathValue("id"), data)
}

// approvalVisible reports whether who may see a: operators see every
// approval, an agent principal only those it filed.
func approvalVisible(who principal, a gateway.Approval) bool {
	return who.operator() || a.RequestedBy == who.Name
}
