package api

import (
	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/gateway"
	"github.com/ironclaw/ironclaw/internal/tools"
)

// The API writes only wire types. These turn the domain objects whose
// JSON form is also written elsewhere (an approval in a webhook, a record
// in an export) into theirs; views_test.go proves that each one carries
// every field, the same as the domain type's own encoding.

// views is each of list in its API form. It is never nil, so that an
// empty list is written as [], not null.
func views[T, V any](list []T, view func(T) V) []V {
	out := make([]V, 0, len(list))
	for _, v := range list {
		out = append(out, view(v))
	}
	return out
}

// approvalView is a's API form.
func approvalView(a gateway.Approval) wire.Approval {
	out := wire.Approval{ID: a.ID, Kind: a.Kind, State: a.State, Session: a.Session, RequestedBy: a.RequestedBy, Via: a.Via,
		Summary: a.Summary, Fields: make([]wire.ApprovalField, 0, len(a.Fields)), AgentNote: a.AgentNote, Data: a.Data,
		CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt, DecidedAt: a.DecidedAt, DecidedBy: a.DecidedBy, Scope: a.Scope,
		Reason: a.Reason, Result: a.Result}
	for _, f := range a.Fields {
		out.Fields = append(out.Fields, wire.ApprovalField{Name: f.Name, Value: f.Value, Format: f.Format})
	}
	return out
}

// toolView is t's API form.
func toolView(t tools.Tool) wire.Tool {
	return wire.Tool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema, Command: t.Command,
		Approval: t.Approval, RegisteredAt: t.RegisteredAt}
}

// recordView is r's API form: its time as hashed, an empty data as {}, as
// audit.Record's own encoding writes them.
func recordView(r audit.Record) wire.AuditRecord {
	data := r.Data
	if len(data) == 0 {
		data = []byte("{}")
	}
	return wire.AuditRecord{Seq: r.Seq, Time: audit.FormatTime(r.Time), Session: r.Session, Actor: r.Actor, Kind: r.Kind,
		Data: data, PrevHash: r.PrevHash, Hash: r.Hash, MAC: r.MAC}
}

// verificationView is res's API form.
func verificationView(res audit.Result) wire.AuditVerification {
	c := res.Checkpoints
	return wire.AuditVerification{OK: res.OK, Checked: res.Checked, FirstSeq: res.FirstSeq, LastSeq: res.LastSeq,
		LastHash: res.LastHash, BadSeq: res.BadSeq, Problem: string(res.Problem), Reason: res.Reason,
		CheckpointSeq: res.CheckpointSeq, KeyID: res.KeyID, Authenticated: res.Authenticated, Legacy: res.Legacy,
		Checkpoints: wire.AuditCheckpoints{File: c.File, Read: c.Read, Matched: c.Matched, NewestSeq: c.NewestSeq,
			NewestTime: c.NewestTime, Unproven: c.Unproven}}
}
