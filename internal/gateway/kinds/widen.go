package kinds

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/egress"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// MaxWidenRules bounds the egress rules of one sandbox.widen request.
const MaxWidenRules = 64

// SandboxWiden is a sandbox.widen request: more egress rules, larger
// limits and a longer life for one running sandbox. Its JSON form is
//
//	{"egress_allow": ["api.example.com:443"],
//	 "limits": {"memory": 1073741824, "pids": 512, "cpus": 2, "timeout": "5m0s",
//	            "output": 4194304, "ttl": "2h0m0s", "idle": "30m0s"}}
//
// (sizes may be filed as "1G"; they are stored as numbers).
type SandboxWiden struct {
	EgressAllow []string     `json:"egress_allow,omitempty"`
	Limits      *WidenLimits `json:"limits,omitempty"`
}

// WidenLimits are the limits a running sandbox can change, and its
// lifetime. Zero fields stay as they are.
type WidenLimits struct {
	Memory  Bytes    `json:"memory,omitempty"`
	Pids    int64    `json:"pids,omitempty"`
	CPUs    float64  `json:"cpus,omitempty"`
	Timeout Duration `json:"timeout,omitempty"`
	Output  Bytes    `json:"output,omitempty"`
	TTL     Duration `json:"ttl,omitempty"` // counted from the sandbox's creation
	Idle    Duration `json:"idle,omitempty"`
}

// DecodeWidenLimits reads the body of POST /v1/sandboxes/{id}/limits: a
// WidenLimits object, strictly, validated.
func DecodeWidenLimits(data []byte) (*WidenLimits, error) {
	var l WidenLimits
	if err := decodeStrict(data, &l); err != nil {
		return nil, fmt.Errorf("%w: limits: %v", ErrInvalid, err)
	}
	if err := l.check(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return &l, nil
}

// Sandbox is the limits to apply with session.Manager.UpdateLimits.
func (l *WidenLimits) Sandbox() sandbox.Limits {
	return sandbox.Limits{MemoryBytes: int64(l.Memory), Pids: l.Pids, CPUs: l.CPUs, Timeout: time.Duration(l.Timeout), OutputBytes: int64(l.Output)}
}

func (l *WidenLimits) check() error {
	if l.Pids < 0 || l.CPUs < 0 || math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0) {
		return errors.New("limits must not be negative")
	}
	sl := l.Sandbox()
	if sl == (sandbox.Limits{}) && l.TTL == 0 && l.Idle == 0 {
		return errors.New("give at least one of memory, pids, cpus, timeout, output, ttl, idle")
	}
	// Check each given limit against the maxima by validating a full set
	// in which the others take their defaults.
	full := sandbox.DefaultLimits.Changed(sl)
	if err := full.Validate(); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), sandbox.ErrInvalidSpec.Error()+": "))
	}
	return nil
}

func (l *WidenLimits) fields() []Field {
	return limitFields(l.Sandbox(), time.Duration(l.TTL), time.Duration(l.Idle))
}

func (*SandboxWiden) Kind() string { return KindSandboxWiden }

func (p *SandboxWiden) check() error {
	if len(p.EgressAllow) == 0 && p.Limits == nil {
		return errors.New("give egress_allow or limits")
	}
	if len(p.EgressAllow) > MaxWidenRules {
		return fmt.Errorf("egress_allow: %d rules, at most %d", len(p.EgressAllow), MaxWidenRules)
	}
	if p.EgressAllow != nil && len(p.EgressAllow) == 0 {
		p.EgressAllow = nil
	}
	for i, r := range p.EgressAllow {
		rule, err := egress.ParseRule(r)
		if err != nil {
			return fmt.Errorf("egress_allow %q: %v", r, err)
		}
		p.EgressAllow[i] = rule.String()
	}
	if p.Limits != nil {
		return p.Limits.check()
	}
	return nil
}

func (p *SandboxWiden) Summary(t Target) string {
	parts := []string{"widen sandbox", esc(sandboxName(t.Session)) + ":"}
	if n := len(p.EgressAllow); n > 0 {
		parts = append(parts, fmt.Sprintf("egress +%d (%s)", n, esc(strings.Join(p.EgressAllow, ", "))))
	}
	if p.Limits != nil {
		if len(p.EgressAllow) > 0 {
			parts[len(parts)-1] += ";"
		}
		parts = append(parts, esc(limitWords(p.Limits.fields())))
	}
	return summary(parts...)
}

func (p *SandboxWiden) Fields(t Target) []Field {
	out := []Field{{Name: "sandbox", Value: sandboxName(t.Session)}}
	for _, r := range p.EgressAllow {
		out = append(out, Field{Name: "egress allow", Value: r})
	}
	if p.Limits != nil {
		out = append(out, p.Limits.fields()...)
	}
	return out
}

func (p *SandboxWiden) Apply(ctx context.Context, env Env, t Target) (map[string]any, error) {
	if env.Sandboxes == nil {
		return nil, fmt.Errorf("%w: no sandboxes", ErrUnavailable)
	}
	out := map[string]any{"sandbox": t.Session}
	if len(p.EgressAllow) > 0 {
		if err := env.Sandboxes.AllowEgress(ctx, t.Session, p.EgressAllow); err != nil {
			return nil, err
		}
		out["egress_allow"] = p.EgressAllow
	}
	if l := p.Limits; l != nil {
		if sl := l.Sandbox(); sl != (sandbox.Limits{}) {
			if err := env.Sandboxes.UpdateLimits(ctx, t.Session, sl); err != nil {
				return nil, err
			}
			out["limits"] = limitsView(sl)
		}
		if l.TTL != 0 || l.Idle != 0 {
			if err := env.Sandboxes.SetLifetime(ctx, t.Session, time.Duration(l.TTL), time.Duration(l.Idle)); err != nil {
				return nil, err
			}
			if l.TTL != 0 {
				out["ttl"] = time.Duration(l.TTL).String()
			}
			if l.Idle != 0 {
				out["idle"] = time.Duration(l.Idle).String()
			}
		}
	}
	return out, nil
}

func limitsView(l sandbox.Limits) map[string]any {
	m := map[string]any{}
	if l.MemoryBytes != 0 {
		m["memory_bytes"] = l.MemoryBytes
	}
	if l.Pids != 0 {
		m["pids"] = l.Pids
	}
	if l.CPUs != 0 {
		m["cpus"] = l.CPUs
	}
	if l.Timeout != 0 {
		m["timeout"] = l.Timeout.String()
	}
	if l.OutputBytes != 0 {
		m["output_bytes"] = l.OutputBytes
	}
	return m
}
