package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/gateway"
	"github.com/ironclaw/ironclaw/internal/gateway/kinds"
	"github.com/ironclaw/ironclaw/internal/session"
	"github.com/ironclaw/ironclaw/internal/textsafe"
	"github.com/ironclaw/ironclaw/internal/tools"
)

// Gateway is what the API needs of the approval gateway.
type Gateway interface {
	File(ctx context.Context, r gateway.Request) (gateway.Approval, error)
	Get(ctx context.Context, id string) (gateway.Approval, error)
	List(ctx context.Context, f gateway.Filter) (gateway.Page, error)
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
		return &apiError{http.StatusServiceUnavailable, wire.CodeUnavailable, "shutting down"}
	}
	return err
}

// pending answers 202 with a filed request.
func pending(w http.ResponseWriter, a gateway.Approval) {
	w.Header().Set("Location", "/v1/approvals/"+a.ID)
	writeJSON(w, http.StatusAccepted, approvalView(a))
}

// runningSandbox checks a request's sandbox exists, is who's to use, and
// runs.
func (s *Server) runningSandbox(ctx context.Context, who principal, id string) error {
	info, err := s.sandboxOf(ctx, who, id)
	if err != nil {
		return err
	}
	if !session.Active(info.State) {
		return &apiError{http.StatusConflict, wire.CodeConflict, fmt.Sprintf("sandbox %s is %s", id, info.State)}
	}
	return nil
}

// fileApproval lets an agent file the kinds that have no route of their
// own: egress.host, exec.command and tool.call. The others carry requests
// that their routes validate. Note is the agent's own text about the
// request; Summary is its older name (the summary shown is always derived
// from data).
func (s *Server) fileApproval(w http.ResponseWriter, r *http.Request, who principal) error {
	var b wire.FileApprovalRequest
	if err := decodeJSON(s.bodyOf(w, r), &b); err != nil {
		if err == io.EOF {
			return badRequest("empty body: kind and data are required")
		}
		return err
	}
	switch b.Kind {
	case gateway.KindEgressHost, gateway.KindExecCommand, gateway.KindToolCall:
	case gateway.KindToolRegister:
		return badRequest("file tool.register requests with POST /v1/tools")
	case gateway.KindAgentSpawn:
		return badRequest("file agent.spawn requests with POST /v1/agents")
	case gateway.KindSandboxWiden:
		return badRequest("file sandbox.widen requests with POST /v1/sandboxes/{id}/egress or /limits")
	default:
		return badRequest(fmt.Sprintf("unknown kind %q", b.Kind))
	}
	if len(b.Data) == 0 {
		return badRequest("data is required")
	}
	if b.Note != "" && b.Summary != "" {
		return badRequest("give note or summary (its older name), not both")
	}
	note := b.Note + b.Summary
	if len(note) > gateway.MaxNote {
		return badRequest(fmt.Sprintf("note: %d bytes, at most %d", len(note), gateway.MaxNote))
	}
	if err := textsafe.Check("note", note); err != nil {
		return badRequest(err.Error())
	}
	p, err := kinds.Decode(b.Kind, b.Data)
	if err != nil {
		return err
	}
	if e, ok := p.(*kinds.ExecCommand); ok && e.Pattern != "" {
		return badRequest("data.pattern is the daemon's: the policy pattern a command matched")
	}
	if b.Session != "" {
		if err := s.runningSandbox(r.Context(), who, b.Session); err != nil {
			return err
		}
	}
	a, err := s.cfg.Gateway.File(r.Context(), gateway.Request{Kind: b.Kind, Session: b.Session, Note: note, Data: p, By: who.Name})
	if err != nil {
		return gatewayError(err)
	}
	pending(w, a)
	return nil
}

// listApprovals is GET /v1/approvals: one page, newest first, of what the
// caller may see; ?watch=1 streams instead.
func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request, who principal) error {
	q := r.URL.Query()
	if v := q.Get("watch"); v == "1" || v == "true" {
		return s.watchApprovals(w, r, who)
	}
	f := gateway.Filter{State: q.Get("state"), Session: q.Get("session"), Kind: q.Get("kind"), Cursor: q.Get("cursor"),
		RequestedBy: who.listScope()}
	switch f.State {
	case "", gateway.StatePending, gateway.StateApproved, gateway.StateDenied, gateway.StateExpired:
	default:
		return badRequest(fmt.Sprintf("state %q: want pending, approved, denied or expired", f.State))
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > gateway.MaxListLimit {
			return badRequest(fmt.Sprintf("limit %q: want 1-%d", v, gateway.MaxListLimit))
		}
		f.Limit = n
	}
	page, err := s.cfg.Gateway.List(r.Context(), f)
	if err != nil {
		return gatewayError(err)
	}
	writeJSON(w, http.StatusOK, wire.ApprovalList{Approvals: views(page.Approvals, approvalView), Next: page.Next})
	return nil
}

// watchReplayPage is how many pending approvals a watch reads at a time
// while it replays them.
const watchReplayPage = 200

// watchApprovals streams every pending approval the caller may see (all
// of them, oldest first, read page by page), then every change.
func (s *Server) watchApprovals(w http.ResponseWriter, r *http.Request, who principal) error {
	// Subscribe before listing, so nothing filed in between is missed (it
	// may come twice; clients upsert by id).
	ch, cancel := s.cfg.Gateway.Subscribe()
	defer cancel()
	f := gateway.Filter{State: gateway.StatePending, RequestedBy: who.listScope(), OldestFirst: true, Limit: watchReplayPage}
	page, err := s.cfg.Gateway.List(r.Context(), f)
	if err != nil {
		return gatewayError(err)
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	for {
		for _, a := range page.Approvals {
			if err := enc.Encode(approvalView(a)); err != nil {
				return nil
			}
		}
		if page.Next == "" {
			break
		}
		f.Cursor = page.Next
		if page, err = s.cfg.Gateway.List(r.Context(), f); err != nil {
			s.cfg.Logf("api: approvals watch replay: %v", err)
			return nil // the client reconnects and replays again
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
			if !approvalVisible(who, a) {
				continue
			}
			if err := enc.Encode(approvalView(a)); err != nil {
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

// getApproval is GET /v1/approvals/{id}[?wait=D]. An agent principal gets
// 404 for another principal's approval, before any waiting.
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
	a, err := s.cfg.Gateway.Get(r.Context(), id)
	if err != nil {
		return gatewayError(err)
	}
	if !approvalVisible(who, a) {
		return fmt.Errorf("%w: %q", gateway.ErrNotFound, id)
	}
	if wait > 0 && a.Pending() {
		if a, err = s.cfg.Gateway.Wait(r.Context(), id, wait); err != nil {
			if r.Context().Err() != nil {
				return nil
			}
			return gatewayError(err)
		}
	}
	writeJSON(w, http.StatusOK, approvalView(a))
	return nil
}

// decide approves or denies. The decider is the operator behind the token;
// the body cannot name one (an unknown field is refused).
func (s *Server) decide(approve bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, who principal) error {
		var b wire.DecideRequest
		if err := decodeJSON(s.bodyOf(w, r), &b); err != nil && err != io.EOF {
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
		writeJSON(w, http.StatusOK, approvalView(a))
		return nil
	}
}

func (s *Server) listTools(w http.ResponseWriter, r *http.Request, who principal) error {
	list := []tools.Tool{}
	if s.cfg.Tools != nil {
		var err error
		if list, err = s.cfg.Tools.List(r.Context()); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, wire.ToolList{Tools: views(list, toolView)})
	return nil
}
