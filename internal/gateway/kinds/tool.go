package kinds

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ironclaw/ironclaw/internal/textsafe"
	"github.com/ironclaw/ironclaw/internal/tools"
)

// ToolRegister is a tool.register request: a tool definition to list in
// GET /v1/tools once approved.
type ToolRegister struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"` // a JSON Schema object
	Command     string          `json:"command,omitempty"`      // what it runs in a sandbox, if anything
}

func (*ToolRegister) Kind() string { return KindToolRegister }

// Tool is the definition to register.
func (p *ToolRegister) Tool() tools.Tool {
	return tools.Tool{Name: p.Name, Description: p.Description, InputSchema: p.InputSchema, Command: p.Command}
}

func (p *ToolRegister) check() error {
	if err := p.Tool().Validate(); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), tools.ErrInvalid.Error()+": "))
	}
	return nil
}

func (p *ToolRegister) Summary(Target) string {
	if p.Command == "" {
		return summary("register the tool", esc(p.Name))
	}
	return summary("register the tool", esc(p.Name), "running", esc(p.Command))
}

func (p *ToolRegister) Fields(Target) []Field {
	out := []Field{{Name: "name", Value: p.Name}, {Name: "description", Value: p.Description}}
	if p.Command != "" {
		out = append(out, Field{Name: "command", Value: p.Command})
	}
	if len(p.InputSchema) > 0 {
		out = append(out, Field{Name: "input schema", Value: compactJSON(p.InputSchema), Format: FormatJSON})
	}
	return out
}

func (p *ToolRegister) Apply(ctx context.Context, env Env, t Target) (map[string]any, error) {
	if env.Tools == nil {
		return nil, fmt.Errorf("%w: no tool registry", ErrUnavailable)
	}
	reg, err := env.Tools.Register(ctx, p.Tool(), t.ID)
	if err != nil {
		return nil, err
	}
	return map[string]any{"tool": reg.Name}, nil
}

// ToolCall is a tool.call request: an SDK or adapter asks before it calls
// a tool it flags. The daemon does nothing on approval; the caller
// proceeds.
type ToolCall struct {
	Tool  string          `json:"tool"`
	Input json.RawMessage `json:"input,omitempty"` // the call's arguments, any JSON
}

// MaxToolName bounds ToolCall.Tool.
const MaxToolName = 256

func (*ToolCall) Kind() string { return KindToolCall }

func (p *ToolCall) check() error {
	switch {
	case p.Tool == "":
		return errors.New("tool is required")
	case len(p.Tool) > MaxToolName:
		return fmt.Errorf("tool name longer than %d bytes", MaxToolName)
	}
	return textsafe.Check("tool", p.Tool)
}

func (p *ToolCall) Summary(Target) string { return summary("call the tool", esc(p.Tool)) }

func (p *ToolCall) Fields(t Target) []Field {
	out := []Field{{Name: "tool", Value: p.Tool}}
	if len(p.Input) > 0 {
		out = append(out, Field{Name: "arguments", Value: compactJSON(p.Input), Format: FormatJSON})
	} else {
		out = append(out, Field{Name: "arguments", Value: "(none)"})
	}
	if t.Session != "" {
		out = append(out, Field{Name: "sandbox", Value: t.Session})
	}
	return out
}

func (*ToolCall) Apply(context.Context, Env, Target) (map[string]any, error) { return nil, nil }

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}
