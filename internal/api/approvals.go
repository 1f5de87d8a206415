package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/ironclaw/ironclaw/internal/egress"
	"github.com/ironclaw/ironclaw/internal/gateway"
	"github.com/ironclaw/ironclaw/internal/session"
	"github.com/ironclaw/ironclaw/internal/tools"
)

// Gateway is what the API needs of the approval gateway.
type Gateway interface {
	File(ctx context.Context, r gateway.Request) (gateway.Approval, error)
	Get(ctx context.Context, id string) (gateway.Approval, error)
	List(ctx context.Context, f gateway.Filter) ([]gateway.Approval, error)
	Decide(ctx context.Context, id string, d gateway.Decision) (gateway.Approval, error)
	Wait(ctx context.Context, id string, d time.Duration) (gateway.Approval, error)
	Subscribe() (<-chan gateway.Approval, func())
	Use(ctx context.Context, id, session string, check func(data json.RawMessage) error) error
}

// ExecPolicy marks commands that need approval (see execgate.go).
type ExecPolicy interface {
	NeedsApproval(commandLine string) (bool, string)
	Gated(argv0 string) string
}

// ToolLister lists registered tools.
type ToolLister interface {
	List(ctx context.Context) ([]tools.Tool, error)
}

const maxApprovalWait = 5 * time.Minute

// gatewayError renders the gateway's errors. Their classes render
// themselves (classify); only a closed gateway gets its own words.
func gatewayError(err error) error {
	if errors.Is(err, gateway.ErrClosed) {
		return &apiError{http.StatusServiceUnavailable, "unavailable", "shutting down"}
	}
	return err
}

// pending answers 202 with a filed request.
func pending(w http.ResponseWriter, a gateway.Approval) {
	w.Header().Set("Location", "/v1/approvals/"+a.ID)
	writeJSON(w, http.StatusAccepted, a)
}

// runningSandbox checks a request's sandbox exists, is who's to use, and
// runs.
func (s *Server) runningSandbox(ctx context.Context, who principal, id string) error {
	info, err := s.sandboxOf(ctx, who, id)
	if err != nil {
		return err
	}
	if info.State != session.StateRunning {
		return &apiError{http.StatusConflict, "conflict", fmt.Sprintf("sandbox %s is %s", id, info.State)}
	}
	return nil
}

// fileBody is POST /v1/approvals.
type fileBody struct {
	Kind    string          `json:"kind"`
	Session string          `json:"session"`
	Summary string          `json:"summary"`
	Data    json.RawMessage `json:"data"`
}

// fileApproval lets an agent file the kinds that have no route of their
// own: egress.host, exec.command and tool.call. The others carry requests
// that their routes validate.
func (s *Server) fileApproval(w http.ResponseWriter, r *http.Request, who principal) error {
	var b fileBody
	if err := decodeJSON(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), &b); err != nil {
		if err == io.EOF {
			return badRequest("empty body: kind and data are required")
		}
		return err
	}
	var data any
	switch b.Kind {
	case gateway.KindEgressHost:
		var d struct {
			Host string `json:"host"`
			Port int    `json:"port"`
		}
		if err := strictData(b.Data, &d); err != nil {
			return err
		}
		if d.Port < 1 || d.Port > 65535 {
			return badRequest("data.port must be 1-65535")
		}
		if _, err := egress.ParseRule(fmt.Sprintf("%s:%d", d.Host, d.Port)); err != nil {
			return badRequest("data.host: " + err.Error())
		}
		data = d
	case gateway.KindExecCommand:
		var d struct {
			Command string `json:"command"`
		}
		if err := strictData(b.Data, &d); err != nil {
			return err
		}
		if d.Command == "" {
			return badRequest("data.command is required")
		}
		data = d
	case gateway.KindToolCall:
		var d struct {
			Tool  string          `json:"tool"`
			Input json.RawMessage `json:"input,omitempty"`
		}
		if err := strictData(b.Data, &d); err != nil {
			return err
		}
		if d.Tool == "" {
			return badRequest("data.tool is required")
		}
		data = d
	case gateway.KindToolRegister:
		return badRequest("file tool.register requests with POST /v1/tools")
	case gateway.KindAgentSpawn:
		return badRequest("file agent.spawn requests with POST /v1/agents")
	case gateway.KindSandboxWiden:
		return badRequest("file sandbox.widen requests with POST /v1/sandboxes/{id}/egress or /limits")
	default:
		return badRequest(fmt.Sprintf("unknown kind %q", b.Kind))
	}
	if b.Session != "" {
		if err := s.runningSandbox(r.Context(), who, b.Session); err != nil {
			return err
		}
	}
	a, err := s.cfg.Gateway.File(r.Context(), gateway.Request{Kind: b.Kind, Session: b.Session, Summary: b.Summary, Data: data, By: who.Name})
	if err != nil {
		return gatewayError(err)
	}
	pending(w, a)
	return nil
}

func strictData(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return badRequest("data is required")
	}
	if err := decodeJSON(bytesReader(raw), v); err != nil {
		if err == io.EOF {
			return badRequest("data is required")
		}
		var ae *apiError
		if errors.As(err, &ae) {
			return badRequest("data: " + ae.message)
		}
		return err
	}
	return nil
}

func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request, who principal) error {
	q := r.URL.Query()
	if v := q.Get("watch"); v == "1" || v == "true" {
		return s.watchApprovals(w, r)
	}
	f := gateway.Filter{State: q.Get("state"), Session: q.Get("session"), Kind: q.Get("kind")}
	switch f.State {
	case "", gateway.StatePending, gateway.StateApproved, gateway.StateDenied, gateway.StateExpired:
	default:
		return badRequest(fmt.Sprintf("state %q: want pending, approved, denied or expired", f.State))
	}
	list, err := s.cfg.Gateway.List(r.Context(), f)
	if err != nil {
		return gatewayError(err)
	}
	if list == nil {
		list = []gateway.Approval{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"approvals": list})
	return nil
}

// watchApprovals streams every pending approval, then every change.
func (s *Server) watchApprovals(w http.ResponseWriter, r *http.Request) error {
	// Subscribe before listing, so nothing filed in between is missed (it
	// may come twice; clients upsert by id).
	ch, cancel := s.cfg.Gateway.Subscribe()
	defer cancel()
	list, err := s.cfg.Gateway.List(r.Context(), gateway.Filter{State: gateway.StatePending})
	if err != nil {
		return gatewayError(err)
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	for i := len(list) - 1; i >= 0; i-- { // oldest first
		if err := enc.Encode(list[i]); err != nil {
			return nil
		}
	}
	if err := rc.Flush(); err != nil {
		return nil
	}
	keepAlive := time.NewTicker(30 * time.Second)
	defer keepAlive.Stop()
	for {
		select {
		case a, ok := <-ch:
			if !ok {
				return nil // dropped as too slow, or shutting down: the client reconnects
			}
			if err := enc.Encode(a); err != nil {
				return nil
			}
		case <-keepAlive.C:
			// A blank line keeps idle connections from being cut by
			// proxies; NDJSON readers skip it.
			if _, err := w.Write([]byte("\n")); err != nil {
				return nil
			}
		case <-r.Context().Done():
			return nil
		}
		if err := rc.Flush(); err != nil {
			return nil
		}
	}
}

func (s *Server) getApproval(w http.ResponseWriter, r *http.Request, who principal) error {
	id := r.PathValue("id")
	var wait time.Duration
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return badRequest(fmt.Sprintf("wait %q: want a duration such as 30s", v))
		}
		wait = min(d, maxApprovalWait)
	}
	a, err := s.cfg.Gateway.Wait(r.Context(), id, wait)
	if err != nil {
		if r.Context().Err() != nil {
			return nil
		}
		return gatewayError(err)
	}
	writeJSON(w, http.StatusOK, a)
	return nil
}

type decideBody struct {
	Scope  string `json:"scope"`
	Reason string `json:"reason"`
}

// decide approves or denies. The decider is the operator behind the token;
// the body cannot name one (an unknown field is refused).
func (s *Server) decide(approve bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, who principal) error {
		var b decideBody
		if err := decodeJSON(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), &b); err != nil && err != io.EOF {
			return err
		}
		if !approve && b.Scope != "" {
			return badRequest("scope applies to approvals only")
		}
		// The action of an approval (creating an agent's sandbox) must
		// not be cut short by a client that hangs up.
		ctx := context.WithoutCancel(r.Context())
		a, err := s.cfg.Gateway.Decide(ctx, r.PathValue("id"), gateway.Decision{Approve: approve, Scope: b.Scope, Reason: b.Reason, By: identity(r)})
		if err != nil {
			return gatewayError(err)
		}
		writeJSON(w, http.StatusOK, a)
		return nil
	}
}

// toolBody is POST /v1/tools.
type toolBody struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	Command     string          `json:"command"`
}

func (s *Server) registerTool(w http.ResponseWriter, r *http.Request, who principal) error {
	var b toolBody
	if err := decodeJSON(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), &b); err != nil {
		if err == io.EOF {
			return badRequest("empty body: a tool definition is required")
		}
		return err
	}
	t := tools.Tool{Name: b.Name, Description: b.Description, InputSchema: b.InputSchema, Command: b.Command}
	if err := t.Validate(); err != nil {
		return badRequest(err.Error())
	}
	a, err := s.cfg.Gateway.File(r.Context(), gateway.Request{Kind: gateway.KindToolRegister, By: who.Name, Data: t,
		Summary: fmt.Sprintf("register the tool %q", t.Name)})
	if err != nil {
		return gatewayError(err)
	}
	pending(w, a)
	return nil
}

func (s *Server) listTools(w http.ResponseWriter, r *http.Request, who principal) error {
	list := []tools.Tool{}
	if s.cfg.Tools != nil {
		var err error
		if list, err = s.cfg.Tools.List(r.Context()); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tools": list})
	return nil
}

func (s *Server) spawnAgent(w http.ResponseWriter, r *http.Request, who principal) error {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		return err
	}
	b, _, _, err := decodeSpawn(raw)
	if err != nil {
		return err
	}
	a, err := s.cfg.Gateway.File(r.Context(), gateway.Request{Kind: gateway.KindAgentSpawn, By: who.Name, Data: b,
		Summary: "spawn an agent: " + truncate(spawnLine(b), 200)})
	if err != nil {
		return gatewayError(err)
	}
	pending(w, a)
	return nil
}

func (s *Server) widenEgress(w http.ResponseWriter, r *http.Request, who principal) error {
	id := r.PathValue("id")
	var b struct {
		Allow []string `json:"allow"`
	}
	if err := decodeJSON(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), &b); err != nil {
		if err == io.EOF {
			return badRequest(`empty body: {"allow": [...]} is required`)
		}
		return err
	}
	if len(b.Allow) == 0 || len(b.Allow) > 64 {
		return badRequest("allow must list 1-64 rules")
	}
	for _, rule := range b.Allow {
		if _, err := egress.ParseRule(rule); err != nil {
			return badRequest(fmt.Sprintf("allow %q: %v", rule, err))
		}
	}
	if err := s.runningSandbox(r.Context(), who, id); err != nil {
		return err
	}
	a, err := s.cfg.Gateway.File(r.Context(), gateway.Request{Kind: gateway.KindSandboxWiden, Session: id, By: who.Name, Join: true,
		Data: map[string]any{"egress_allow": b.Allow}})
	if err != nil {
		return gatewayError(err)
	}
	pending(w, a)
	return nil
}

func (s *Server) widenLimits(w http.ResponseWriter, r *http.Request, who principal) error {
	id := r.PathValue("id")
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		return err
	}
	b, _, err := decodeWidenLimits(raw)
	if err != nil {
		return err
	}
	if err := s.runningSandbox(r.Context(), who, id); err != nil {
		return err
	}
	a, err := s.cfg.Gateway.File(r.Context(), gateway.Request{Kind: gateway.KindSandboxWiden, Session: id, By: who.Name, Join: true,
		Data: map[string]any{"limits": b}})
	if err != nil {
		return gatewayError(err)
	}
	pending(w, a)
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
