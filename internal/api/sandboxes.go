package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/gateway"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/session"
)

// view is the API's sandbox object of in. Times are UTC.
func view(in session.Info) wire.Sandbox {
	labels := in.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	out := wire.Sandbox{ID: in.ID, State: in.State, Labels: labels, CreatedAt: utc(in.CreatedAt), ExpiresAt: utc(in.ExpiresAt),
		IdleTimeout: in.Idle.String(), IdleAction: in.IdleAction, LastUsedAt: utc(in.LastUsedAt), EndedAt: utc(in.EndedAt), EndReason: in.EndReason}
	if l := in.Limits; session.Active(in.State) && l != (sandbox.Limits{}) {
		out.Limits = &wire.Limits{Memory: wire.Bytes(l.MemoryBytes), Pids: l.Pids, CPUs: l.CPUs, Timeout: wire.Duration(l.Timeout),
			Output: wire.Bytes(l.OutputBytes), Workspace: wire.Bytes(l.WorkspaceBytes), Tmp: wire.Bytes(l.TmpBytes), OpenFiles: l.OpenFiles}
	}
	return out
}

// utc is t in UTC; the zero time stays zero.
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request, who principal) error {
	req, first, err := decodeCreate(s.bodyOf(w, r))
	if err != nil {
		return err
	}
	if req.Snapshot != "" {
		if _, err := s.snapshotOf(who, req.Snapshot); err != nil {
			return err
		}
	}
	// What an agent asks beyond the operator's ceilings and allowlist is a
	// widening: the sandbox starts within them and the rest waits for an
	// operator, as one sandbox.widen request.
	var grow widening
	if !who.operator() {
		if grow, err = s.cfg.Ceiling.clamp(&req); err != nil {
			return err
		}
	}
	var extra []string
	if s.cfg.Gateway != nil && s.cfg.EgressCovers != nil {
		covered := req.EgressAllow[:0:0]
		for _, rule := range req.EgressAllow {
			if s.cfg.EgressCovers(rule) {
				covered = append(covered, rule)
			} else {
				extra = append(extra, rule)
			}
		}
		if len(extra) > 0 {
			// Check the rules now: a bad one must fail the create, not
			// the approval.
			if err := s.m.CheckEgress(extra); err != nil {
				return err
			}
		}
		req.EgressAllow = covered
	}
	if s.cfg.Gateway == nil && !grow.empty() {
		return badRequest("the limits asked for are above the operator's ceiling (policy limits.max), and this daemon has no approval gateway to ask")
	}
	if first != nil && len(extra) == 0 && grow.empty() && len(req.Secrets) == 0 {
		if _, gated := s.gateOf(first); !gated {
			return s.createWithFirstExec(r, w, who, req, *first)
		}
	}
	info, err := s.m.Create(r.Context(), who.Name, req)
	s.metrics.created(err)
	if err != nil {
		return err
	}
	out := wire.CreatedSandbox{Sandbox: view(info)}
	if len(extra) > 0 || !grow.empty() {
		data := map[string]any{}
		if len(extra) > 0 {
			data["egress_allow"] = extra
		}
		if !grow.empty() {
			data["limits"] = grow
		}
		a, err := s.cfg.Gateway.File(r.Context(), gateway.Request{Kind: gateway.KindSandboxWiden, Session: info.ID, By: who.Name, Data: data})
		if err != nil {
			// The sandbox exists either way; the caller learns the
			// widening was not filed.
			s.cfg.Logf("api: widen request for %s: %v", info.ID, err)
			out.ApprovalError = gatewayError(err).Error()
		} else {
			out.Approvals = []wire.Approval{approvalView(a)}
		}
	}
	if len(req.Secrets) > 0 && s.cfg.Gateway != nil {
		// The secret.use requests the create filed, so that the caller
		// can wait on them (requests carrying their placeholders wait
		// anyway).
		page, err := s.cfg.Gateway.List(r.Context(), gateway.Filter{Session: info.ID, Kind: gateway.KindSecretUse, State: gateway.StatePending, OldestFirst: true})
		if err != nil {
			s.cfg.Logf("api: list the secret.use requests of %s: %v", info.ID, err)
		}
		for _, a := range page.Approvals {
			out.Approvals = append(out.Approvals, approvalView(a))
		}
	}
	if first == nil {
		writeJSON(w, http.StatusCreated, out)
		return nil
	}
	return s.createdThenExec(r, w, who, out, *first)
}

// createdThenExec answers a create that carries its first command: a
// 201 stream whose first frame is the sandbox, then the command's frames
// as an exec stream's (its intent audited before it starts), or, for a
// command the policy gates or marks, the exec.command request it filed
// (the command then waits for an operator and is re-sent on its own).
// Once the sandbox exists the answer is 201 whatever becomes of the
// command: its failures are frames.
func (s *Server) createdThenExec(r *http.Request, w http.ResponseWriter, who principal, out wire.CreatedSandbox, call execCall) error {
	st := newFrameStream(w, http.StatusCreated)
	// Sent with the command's start (its intent durable) or with what
	// ends the stream: one write less before the first result.
	if err := st.hold(wire.CreatedFrame{Sandbox: out}); err != nil {
		return nil // the client went away; the sandbox stays theirs
	}
	filed, err := s.gateDecide(r, who, out.ID, &call, modeStream)
	switch {
	case err != nil:
		_ = st.hold(wire.ExecExitFrame{Exit: -1, Error: classify(err).message})
		return nil
	case filed != nil:
		_ = st.hold(wire.ExecPending{Approval: approvalView(*filed)})
		return nil
	}
	return s.streamExec(r, who, out.ID, call.req, st)
}

// createWithFirstExec answers a create whose first command files
// nothing (no gate, no widening, no secrets) as createdThenExec does, but
// the command's intent commits with the create's record
// (session.CreateThenExec): one commit less before its first result, and
// the same records in the same order.
func (s *Server) createWithFirstExec(r *http.Request, w http.ResponseWriter, who principal, req session.CreateRequest, call execCall) error {
	st := newFrameStream(w, http.StatusCreated)
	exec := call.req
	exec.Stdout, exec.Stderr = st.stream("stdout"), st.stream("stderr")
	info, first, err := s.m.CreateThenExec(r.Context(), who.Name, req, exec)
	s.metrics.created(err)
	if err != nil {
		return err // nothing sent yet: a plain error answer
	}
	if err := st.hold(wire.CreatedFrame{Sandbox: wire.CreatedSandbox{Sandbox: view(info)}}); err != nil {
		first.Drop(errors.New("the client went away before it started"))
		return nil // the sandbox stays theirs
	}
	return s.streamRun(r, info.ID, st, func(starting func()) (sandbox.ExecResult, error) {
		return first.Run(r.Context(), starting)
	})
}

// Listing pages: a page holds at most maxPage entries (default
// defaultPage), and "next" continues it.
const (
	defaultPage = 1000
	maxPage     = 1000
)

// pageParams reads ?limit= and ?after=.
func pageParams(r *http.Request) (limit int, after string, err error) {
	limit = defaultPage
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPage {
			return 0, "", badRequest(fmt.Sprintf("limit %s must be a number from 1 to %d", quote(v), maxPage))
		}
		limit = n
	}
	after = r.URL.Query().Get("after")
	if len(after) > 256 {
		return 0, "", badRequest("after is not a cursor of this API")
	}
	return limit, after, nil
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request, who principal) error {
	sel := map[string]string{}
	q := r.URL.Query()["label"]
	if len(q) > maxLabels {
		return badRequest(fmt.Sprintf("at most %d label selectors", maxLabels))
	}
	for _, l := range q {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return badRequest("label selector " + quote(l) + " must be key=value")
		}
		sel[k] = v
	}
	limit, after, err := pageParams(r)
	if err != nil {
		return err
	}
	infos, more, err := s.m.List(r.Context(), session.ListPage{Principal: who.listScope(), Selector: sel, After: after, Limit: limit})
	if err != nil {
		return err
	}
	out := wire.SandboxList{Sandboxes: views(infos, view)}
	if more {
		out.Next = infos[len(infos)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request, who principal) error {
	info, err := s.sandboxOf(r.Context(), who, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, view(info))
	return nil
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request, who principal) error {
	id := r.PathValue("id")
	if _, err := s.sandboxOf(r.Context(), who, id); err != nil {
		return err
	}
	derr := s.m.Destroy(r.Context(), who.Name, id)
	if errors.Is(derr, session.ErrNotFound) {
		return derr
	}
	info, err := s.m.Get(r.Context(), id)
	if err != nil {
		return err
	}
	if derr != nil {
		if session.Active(info.State) {
			return derr
		}
		// Recorded as ended although its teardown failed: the failure is
		// the daemon's to report, not the caller's.
		s.cfg.Logf("api: destroying %s: %v", id, derr)
	}
	writeJSON(w, http.StatusOK, view(info))
	return nil
}

// sandboxOf describes the sandbox id if who may use it: an operator may use
// every sandbox, an agent only those it created. Another principal's
// sandbox is not found, exactly like an id that never existed, so an agent
// learns nothing of others' ids.
func (s *Server) sandboxOf(ctx context.Context, who principal, id string) (session.Info, error) {
	info, err := s.m.Get(ctx, id)
	if err != nil {
		return session.Info{}, err
	}
	if !who.operator() && info.Principal != who.Name {
		return session.Info{}, fmt.Errorf("%w: %s", session.ErrNotFound, id)
	}
	return info, nil
}

// notRunning turns session.ErrNotFound for a sandbox that exists but has
// ended into 409 conflict.
func (s *Server) notRunning(r *http.Request, id string, err error) error {
	if !errors.Is(err, session.ErrNotFound) {
		return err
	}
	info, gerr := s.m.Get(r.Context(), id)
	if gerr != nil || session.Active(info.State) {
		return err
	}
	return &apiError{http.StatusConflict, wire.CodeConflict, "sandbox " + id + " is " + info.State + ", not running"}
}

func quote(s string) string {
	if len(s) > 100 {
		s = s[:100] + "..."
	}
	return "\"" + strings.ToValidUTF8(s, "\uFFFD") + "\""
}
