package wire

import (
	"encoding/json"
	"time"
)

// Approval is an approval request of the gateway and, once decided, its
// decision.
//
// Summary and Fields are derived by the daemon from Data, the validated
// payload that an approval applies; AgentNote is the requester's own text,
// never a description of what will happen. Every string may hold what an
// agent wrote: escape it before printing it.
type Approval struct {
	ID    string `json:"id"`
	Kind  string `json:"kind"`
	State string `json:"state"` // pending, approved, denied or expired
	// Session is the sandbox it concerns, if any.
	Session     string `json:"session,omitempty"`
	RequestedBy string `json:"requested_by"`
	// Via names the part of the daemon that filed it for RequestedBy
	// ("egress": a held connection).
	Via       string          `json:"via,omitempty"`
	Summary   string          `json:"summary"`
	Fields    []ApprovalField `json:"fields"`
	AgentNote string          `json:"agent_note,omitempty"`
	Data      json.RawMessage `json:"data"`
	CreatedAt time.Time       `json:"created_at"`
	ExpiresAt time.Time       `json:"expires_at"`
	// DecidedAt, DecidedBy, Scope and Reason are set once decided.
	DecidedAt *time.Time `json:"decided_at,omitempty"`
	DecidedBy string     `json:"decided_by,omitempty"`
	Scope     string     `json:"scope,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	// Result is what the approved action did, e.g. {"sandbox": "sbx-..."}.
	Result json.RawMessage `json:"result,omitempty"`
}

// ApprovalField is one decisive field of an approval, in full. Format
// "json" marks a Value that is JSON text (an argv, a tool's arguments).
type ApprovalField struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Format string `json:"format,omitempty"`
}

// ApprovalList is one page of GET /v1/approvals, newest first. Next, when
// set, is the ?cursor= of the next page.
type ApprovalList struct {
	Approvals []Approval `json:"approvals"`
	Next      string     `json:"next,omitempty"`
}

// FileApprovalRequest is POST /v1/approvals: an agent files a request of
// kind egress.host, exec.command or tool.call.
type FileApprovalRequest struct {
	Kind string `json:"kind"`
	// Session is required for egress.host and exec.command.
	Session string `json:"session,omitempty"`
	// Note is the agent's own text about the request (at most 500 bytes of
	// printable text); Summary is its older name. Give one.
	Note    string          `json:"note,omitempty"`
	Summary string          `json:"summary,omitempty"`
	Data    json.RawMessage `json:"data"`
}

// DecideRequest is POST /v1/approvals/{id}/approve and /deny. Scope
// (sandbox or global) applies to approving an egress.host request only.
type DecideRequest struct {
	Scope  string `json:"scope,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Tool is a registered tool (GET /v1/tools).
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	// Command is what it runs in a sandbox, if anything.
	Command string `json:"command,omitempty"`
	// Approval is the tool.register request that registered it.
	Approval     string    `json:"approval,omitempty"`
	RegisteredAt time.Time `json:"registered_at,omitzero"`
}

// ToolList is GET /v1/tools.
type ToolList struct {
	Tools []Tool `json:"tools"`
}
