package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/ironclaw/ironclaw/internal/api/wire"
)

// Approval is an approval request of the gateway (docs/http-api.md).
//
// Summary and Fields are derived by the daemon from Data, the validated
// payload that an approval applies; AgentNote is the requester's own text
// about it, never a description of what will happen. Every string here may
// hold what an agent wrote: escape it before printing it
// (textsafe.Escape).
type Approval = wire.Approval

// ApprovalField is one decisive field of an approval: what the operator
// must read to decide, in full. Format "json" marks a Value that is JSON
// text (an argv, a tool's arguments).
type ApprovalField = wire.ApprovalField

// ApprovalRequiredError is returned by Exec for a command the daemon's
// policy marks: the request waits at the gateway. Once approved, run the
// same command again with ExecRequest.Approval set to its id.
type ApprovalRequiredError struct{ Approval Approval }

func (e *ApprovalRequiredError) Error() string {
	return fmt.Sprintf("this command needs an operator's approval: request %s is %s", e.Approval.ID, e.Approval.State)
}

func approvalPath(id string, rest string) string {
	return "/v1/approvals/" + url.PathEscape(id) + rest
}

// ApprovalFilter selects approvals; empty fields match everything.
type ApprovalFilter struct {
	State, Session, Kind string
	// Limit is the page size of ListApprovalsPage (0: the daemon's
	// default, 500).
	Limit int
}

// maxListedApprovals bounds what ListApprovals collects over all pages.
const maxListedApprovals = 100_000

// ListApprovals returns every approval matching f, newest first, following
// the daemon's pages (operator token).
func (c *Client) ListApprovals(ctx context.Context, f ApprovalFilter) ([]Approval, error) {
	var all []Approval
	cursor := ""
	for {
		page, next, err := c.ListApprovalsPage(ctx, f, cursor)
		if err != nil {
			return all, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		if len(all) >= maxListedApprovals {
			return all, fmt.Errorf("approvals: more than %d match; narrow the filter", maxListedApprovals)
		}
		cursor = next
	}
}

// ListApprovalsPage returns one page of approvals, newest first, after
// cursor ("" for the first page), and the cursor of the next page ("" when
// this was the last).
func (c *Client) ListApprovalsPage(ctx context.Context, f ApprovalFilter, cursor string) ([]Approval, string, error) {
	q := url.Values{}
	for k, v := range map[string]string{"state": f.State, "session": f.Session, "kind": f.Kind, "cursor": cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var out wire.ApprovalList
	err := c.doJSON(ctx, operator, http.MethodGet, "/v1/approvals", q, nil, &out)
	return out.Approvals, out.Next, err
}

// GetApproval returns one approval (agent token: only its own); with
// wait > 0 it long-polls until the request is decided or wait passes.
func (c *Client) GetApproval(ctx context.Context, id string, wait time.Duration) (Approval, error) {
	return c.getApproval(ctx, agent, id, wait)
}

// ShowApproval is GetApproval with the operator token, which sees every
// principal's approvals (an agent token sees only its own).
func (c *Client) ShowApproval(ctx context.Context, id string, wait time.Duration) (Approval, error) {
	return c.getApproval(ctx, operator, id, wait)
}

func (c *Client) getApproval(ctx context.Context, r role, id string, wait time.Duration) (Approval, error) {
	q := url.Values{}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	var a Approval
	err := c.doJSON(ctx, r, http.MethodGet, approvalPath(id, ""), q, nil, &a)
	return a, err
}

// Approve approves a request (operator). scope is "sandbox" (the default)
// or "global", for egress.host requests only.
func (c *Client) Approve(ctx context.Context, id, scope, reason string) (Approval, error) {
	var a Approval
	err := c.doJSON(ctx, operator, http.MethodPost, approvalPath(id, "/approve"), nil, wire.DecideRequest{Scope: scope, Reason: reason}, &a)
	return a, err
}

// Deny denies a request (operator).
func (c *Client) Deny(ctx context.Context, id, reason string) (Approval, error) {
	var a Approval
	err := c.doJSON(ctx, operator, http.MethodPost, approvalPath(id, "/deny"), nil, wire.DecideRequest{Reason: reason}, &a)
	return a, err
}

// FileApproval files a request of kind egress.host, exec.command or
// tool.call (agent). note is the agent's own text about it, shown to the
// operator labelled as the agent's (printable, at most 500 bytes).
func (c *Client) FileApproval(ctx context.Context, kind, session, note string, data any) (Approval, error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return Approval{}, fmt.Errorf("approval data: %w", err)
	}
	var a Approval
	err = c.doJSON(ctx, agent, http.MethodPost, "/v1/approvals", nil,
		wire.FileApprovalRequest{Kind: kind, Session: session, Note: note, Data: raw}, &a)
	return a, err
}

// WatchApprovals calls fn with every pending approval, then with each
// approval as it is filed or changes state, until ctx ends (returning its
// error), fn fails, or the stream breaks.
func (c *Client) WatchApprovals(ctx context.Context, fn func(Approval) error) error {
	resp, err := c.do(ctx, operator, http.MethodGet, "/v1/approvals", url.Values{"watch": {"1"}}, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var a Approval
		if err := json.Unmarshal(line, &a); err != nil {
			return fmt.Errorf("approvals watch: %w", err)
		}
		if err := fn(a); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("approvals watch: %w", err)
	}
	return errors.New("approvals watch: the daemon ended the stream")
}

// postPending posts a privileged request and returns the approval filed.
func (c *Client) postPending(ctx context.Context, path string, body any) (Approval, error) {
	var a Approval
	err := c.doJSON(ctx, agent, http.MethodPost, path, nil, body, &a)
	return a, err
}

// RegisterTool files a tool.register request.
func (c *Client) RegisterTool(ctx context.Context, def map[string]any) (Approval, error) {
	return c.postPending(ctx, "/v1/tools", def)
}

// Tool is a tool definition operators approved.
type Tool = wire.Tool

// ListTools returns the registered tools (GET /v1/tools).
func (c *Client) ListTools(ctx context.Context) ([]Tool, error) {
	var out wire.ToolList
	err := c.doJSON(ctx, agent, http.MethodGet, "/v1/tools", nil, nil, &out)
	return out.Tools, err
}

// SpawnAgent files an agent.spawn request; body is a create request plus
// cmd or argv.
func (c *Client) SpawnAgent(ctx context.Context, body map[string]any) (Approval, error) {
	return c.postPending(ctx, "/v1/agents", body)
}

// WidenEgress files a sandbox.widen request for more egress rules.
func (c *Client) WidenEgress(ctx context.Context, id string, allow []string) (Approval, error) {
	return c.postPending(ctx, sandboxPath(id, "/egress"), wire.EgressAllow{Allow: allow})
}

// WidenLimits files a sandbox.widen request for larger limits or a longer
// life (keys memory, pids, cpus, timeout, output, ttl, idle).
func (c *Client) WidenLimits(ctx context.Context, id string, limits map[string]any) (Approval, error) {
	return c.postPending(ctx, sandboxPath(id, "/limits"), limits)
}
