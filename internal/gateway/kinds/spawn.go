package kinds

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/egress"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/session"
)

// LabelAgent is the label an approved agent.spawn puts on the sandbox it
// creates: the approval's id.
const LabelAgent = "ironclaw.agent"

// AgentSpawn is an agent.spawn request (POST /v1/agents): a sandbox to
// create, as POST /v1/sandboxes takes it, and the command to run in it.
type AgentSpawn struct {
	Image  string            `json:"image,omitempty"`
	Env    map[string]string `json:"env,omitempty"`
	Limits *SpawnLimits      `json:"limits,omitempty"`
	TTL    Duration          `json:"ttl,omitempty"`
	Idle   Duration          `json:"idle,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	Egress *SpawnEgress      `json:"egress,omitempty"`
	// Exactly one of Cmd (run with /bin/sh -c) and Argv.
	Cmd  *string  `json:"cmd,omitempty"`
	Argv []string `json:"argv,omitempty"`
}

// SpawnLimits are a spawned sandbox's limits; zero fields take defaults.
type SpawnLimits struct {
	Memory    Bytes    `json:"memory,omitempty"`
	Pids      int64    `json:"pids,omitempty"`
	CPUs      float64  `json:"cpus,omitempty"`
	Timeout   Duration `json:"timeout,omitempty"`
	Output    Bytes    `json:"output,omitempty"`
	Workspace Bytes    `json:"workspace,omitempty"`
	Tmp       Bytes    `json:"tmp,omitempty"`
	OpenFiles int64    `json:"open_files,omitempty"`
}

// SpawnEgress is a spawned sandbox's egress allowlist.
type SpawnEgress struct {
	Allow []string `json:"allow"`
}

func (*AgentSpawn) Kind() string { return KindAgentSpawn }

// ArgvToRun is the command that runs: argv, or cmd under /bin/sh -c.
func (p *AgentSpawn) ArgvToRun() []string {
	if p.Cmd != nil {
		return []string{"/bin/sh", "-c", *p.Cmd}
	}
	return p.Argv
}

// Request is the sandbox to create. Labels are a fresh map.
func (p *AgentSpawn) Request() session.CreateRequest {
	var req session.CreateRequest
	req.Image = p.Image
	for _, k := range sortedKeys(p.Env) {
		req.Spec.Env = append(req.Spec.Env, k+"="+p.Env[k])
	}
	if l := p.Limits; l != nil {
		req.Spec.Limits = sandbox.Limits{
			MemoryBytes: int64(l.Memory), Pids: l.Pids, CPUs: l.CPUs, Timeout: time.Duration(l.Timeout),
			OutputBytes: int64(l.Output), WorkspaceBytes: int64(l.Workspace), TmpBytes: int64(l.Tmp), OpenFiles: l.OpenFiles,
		}
	}
	if p.Egress != nil {
		req.EgressAllow = slices.Clone(p.Egress.Allow)
	}
	req.Labels = map[string]string{}
	for k, v := range p.Labels {
		req.Labels[k] = v
	}
	req.TTL, req.Idle = time.Duration(p.TTL), time.Duration(p.Idle)
	return req
}

func (p *AgentSpawn) check() error {
	switch {
	case p.Cmd != nil && p.Argv != nil:
		return errors.New("give either cmd or argv, not both")
	case p.Cmd != nil:
		if strings.TrimSpace(*p.Cmd) == "" {
			return errors.New("empty command")
		}
	case len(p.Argv) == 0 || p.Argv[0] == "":
		return errors.New("empty command: give cmd or a non-empty argv")
	}
	for _, a := range p.ArgvToRun() {
		if strings.IndexByte(a, 0) >= 0 {
			return errors.New("the command contains a NUL byte")
		}
	}
	if p.Image != "" {
		if err := session.CheckImageRef(p.Image); err != nil {
			return err
		}
	}
	for k, v := range p.Env {
		if strings.Contains(k, "=") {
			return fmt.Errorf("env: %q is not a valid variable name", k)
		}
		if err := sandbox.ValidateEnv(k + "=" + v); err != nil {
			return fmt.Errorf("env: %v", err)
		}
	}
	if len(p.Labels) > 64 {
		return fmt.Errorf("%d labels, at most 64", len(p.Labels))
	}
	for k, v := range p.Labels {
		if err := checkLabel(k, v); err != nil {
			return err
		}
	}
	if p.Egress != nil {
		if len(p.Egress.Allow) > MaxWidenRules {
			return fmt.Errorf("egress.allow: %d rules, at most %d", len(p.Egress.Allow), MaxWidenRules)
		}
		for i, r := range p.Egress.Allow {
			rule, err := egress.ParseRule(r)
			if err != nil {
				return fmt.Errorf("egress.allow %q: %v", r, err)
			}
			p.Egress.Allow[i] = rule.String()
		}
	}
	if l := p.Limits; l != nil && (l.Pids < 0 || l.OpenFiles < 0 || l.CPUs < 0 || math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0)) {
		return errors.New("limits must not be negative")
	}
	req := p.Request()
	if err := req.Spec.WithDefaults().Validate(); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), sandbox.ErrInvalidSpec.Error()+": "))
	}
	return nil
}

func (p *AgentSpawn) image() string {
	if p.Image == "" {
		return "(the host-toolchain view)"
	}
	return p.Image
}

func (p *AgentSpawn) Summary(Target) string {
	return summary("spawn an agent in", esc(p.image())+":", argvWords(p.ArgvToRun()))
}

func (p *AgentSpawn) Fields(Target) []Field {
	out := []Field{{Name: "image", Value: p.image()}, {Name: "argv", Value: jsonText(p.ArgvToRun()), Format: FormatJSON}}
	if p.Cmd != nil {
		out = append(out, Field{Name: "cmd", Value: *p.Cmd + " (run by /bin/sh -c)"})
	}
	req := p.Request()
	// The limits that will apply: the requested ones over the defaults.
	out = append(out, limitFields(req.Spec.WithDefaults().Limits, req.TTL, req.Idle)...)
	if req.TTL == 0 {
		out = append(out, Field{Name: "ttl", Value: "the daemon's default"})
	}
	if req.Idle == 0 {
		out = append(out, Field{Name: "idle", Value: "the daemon's default"})
	}
	if len(p.Env) == 0 {
		out = append(out, Field{Name: "env", Value: "(none)"})
	} else {
		out = append(out, Field{Name: "env", Value: fmt.Sprintf("%s (%d values set, not shown)", strings.Join(sortedKeys(p.Env), ", "), len(p.Env))})
	}
	if p.Egress != nil {
		for _, r := range p.Egress.Allow {
			out = append(out, Field{Name: "egress allow", Value: r})
		}
	}
	for _, k := range sortedKeys(p.Labels) {
		out = append(out, Field{Name: "label", Value: k + "=" + p.Labels[k]})
	}
	return out
}

func (p *AgentSpawn) Apply(ctx context.Context, env Env, t Target) (map[string]any, error) {
	if env.Sandboxes == nil || env.Agents == nil {
		return nil, fmt.Errorf("%w: no sandboxes", ErrUnavailable)
	}
	req := p.Request()
	req.Labels[LabelAgent] = t.ID
	info, err := env.Sandboxes.Create(ctx, t.RequestedBy, req)
	if err != nil {
		return nil, err
	}
	output := env.Agents.StartAgent(t.ID, t.RequestedBy, info.ID, p.ArgvToRun())
	return map[string]any{"sandbox": info.ID, "output": output}, nil
}
