package api

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/ironclaw/ironclaw/internal/gateway"
)

// gateExec files an exec.command request for a command the policy marks,
// answering 202, or spends the approval the request names. gated reports
// that the response was written.
func (s *Server) gateExec(w http.ResponseWriter, r *http.Request, who principal, id string, call execCall) (gated bool, err error) {
	if s.cfg.Gateway == nil || s.cfg.Policy == nil {
		return false, nil
	}
	need, pattern := s.cfg.Policy.NeedsApproval(call.line)
	if !need {
		return false, nil
	}
	if err := s.runningSandbox(r.Context(), who, id); err != nil {
		return true, err
	}
	if call.approval == "" {
		a, err := s.cfg.Gateway.File(r.Context(), gateway.Request{Kind: gateway.KindExecCommand, Session: id, By: who.Name, Join: true,
			Data: map[string]any{"command": call.line, "pattern": pattern}})
		if err != nil {
			return true, gatewayError(err)
		}
		w.Header().Set("Location", "/v1/approvals/"+a.ID)
		writeJSON(w, http.StatusAccepted, map[string]any{"approval": a})
		return true, nil
	}
	err = s.cfg.Gateway.Use(r.Context(), call.approval, id, func(data json.RawMessage) error {
		var d struct {
			Command string `json:"command"`
		}
		if err := json.Unmarshal(data, &d); err != nil || d.Command != call.line {
			return errors.New("it was approved for a different command")
		}
		return nil
	})
	if err != nil {
		return true, gatewayError(err)
	}
	return false, nil
}
