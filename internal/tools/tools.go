// Package tools is the registry of tool definitions operators approved
// (tool.register requests). Agents and adapters read it to learn which
// tools they may offer a model; a definition gets here only through the
// approval gateway.
package tools

import (
	"github.com/ironclaw/ironclaw/internal/errdefs"

	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/store"
)

// ErrInvalid wraps every problem with a tool definition.
var ErrInvalid = errdefs.New(errdefs.ErrInvalidArgument, "invalid tool definition")

// Tool is one definition.
type Tool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema,omitempty"` // a JSON Schema object
	Command      string          `json:"command,omitempty"`      // what it runs in a sandbox, if anything
	Approval     string          `json:"approval,omitempty"`     // the approval that registered it
	RegisteredAt time.Time       `json:"registered_at,omitzero"`
}

// namePattern compiles on first use, not at init: every process of the
// binary links this package, few validate a tool.
var namePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`) })

// Validate checks a definition before it is filed and again before it is
// stored.
func (t Tool) Validate() error {
	switch {
	case !namePattern().MatchString(t.Name):
		return fmt.Errorf("%w: name %q: 1-64 letters, digits, '_', '.', '-', starting with a letter", ErrInvalid, t.Name)
	case len(t.Description) > 4096:
		return fmt.Errorf("%w: description longer than 4096 bytes", ErrInvalid)
	case len(t.Command) > 4096:
		return fmt.Errorf("%w: command longer than 4096 bytes", ErrInvalid)
	case len(t.InputSchema) > 64<<10:
		return fmt.Errorf("%w: input_schema larger than 64 KiB", ErrInvalid)
	}
	if len(t.InputSchema) > 0 {
		var m map[string]any
		if err := json.Unmarshal(t.InputSchema, &m); err != nil || m == nil {
			return fmt.Errorf("%w: input_schema must be a JSON object", ErrInvalid)
		}
	}
	return nil
}

// Registry stores definitions in the store's tools table.
type Registry struct{ st *store.Store }

// New returns a registry over st.
func New(st *store.Store) *Registry { return &Registry{st: st} }

// Register stores (or replaces) a definition; approval names the approved
// request that allowed it.
func (r *Registry) Register(ctx context.Context, t Tool, approval string) (Tool, error) {
	if err := t.Validate(); err != nil {
		return Tool{}, err
	}
	t.Approval, t.RegisteredAt = approval, time.Now().UTC()
	def, err := json.Marshal(t)
	if err != nil {
		return Tool{}, err
	}
	if _, err := r.st.DB().ExecContext(ctx, `INSERT INTO tools (name, definition, approval, registered_at) VALUES (?, ?, ?, ?)
	ON CONFLICT (name) DO UPDATE SET definition = excluded.definition, approval = excluded.approval, registered_at = excluded.registered_at`,
		t.Name, string(def), approval, t.RegisteredAt.Format(time.RFC3339Nano)); err != nil {
		return Tool{}, fmt.Errorf("tools: register %s: %w", t.Name, err)
	}
	return t, nil
}

// List returns every registered definition by name.
func (r *Registry) List(ctx context.Context) ([]Tool, error) {
	rows, err := r.st.ReadDB().QueryContext(ctx, `SELECT definition FROM tools ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("tools: list: %w", err)
	}
	defer rows.Close()
	out := []Tool{}
	for rows.Next() {
		var def string
		if err := rows.Scan(&def); err != nil {
			return nil, fmt.Errorf("tools: list: %w", err)
		}
		var t Tool
		if err := json.Unmarshal([]byte(def), &t); err != nil {
			return nil, fmt.Errorf("tools: stored definition: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}
