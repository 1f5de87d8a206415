package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/ironclaw/ironclaw/internal/api"
	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/gateway"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/session"
	"github.com/ironclaw/ironclaw/internal/tools"
)

// File names inside the data directory for the gateway.
const (
	// WebhookSecretFile signs webhook deliveries when the policy names no
	// secret file; it is created on first use.
	WebhookSecretFile = "webhook.secret"
	// AgentOutputPath is where a spawned agent's output lands in its
	// sandbox when its command ends.
	AgentOutputPath = "/workspace/agent.log"
	// KindAgentExit is the audit kind of a spawned agent's end.
	KindAgentExit  = "agent.exit"
	maxAgentOutput = 1 << 20
)

// actions are what approved requests do.
type actions struct {
	mgr   *session.Manager
	eg    *egressAccess // nil without a broker
	tools *tools.Registry
	log   *audit.Log
	logf  func(string, ...any)
	wg    sync.WaitGroup // spawned agents' commands
}

func (x *actions) table() map[string]gateway.Action {
	return map[string]gateway.Action{
		gateway.KindEgressHost:   x.egressHost,
		gateway.KindSandboxWiden: x.widen,
		gateway.KindToolRegister: x.registerTool,
		gateway.KindAgentSpawn:   x.spawnAgent,
	}
}

func (x *actions) egressHost(ctx context.Context, a gateway.Approval) (any, error) {
	var d struct {
		Host string `json:"host"`
		Port int    `json:"port"`
	}
	if err := json.Unmarshal(a.Data, &d); err != nil {
		return nil, fmt.Errorf("egress.host data: %w", err)
	}
	if x.eg == nil {
		return nil, fmt.Errorf("this daemon runs no egress broker")
	}
	rule := fmt.Sprintf("%s:%d", d.Host, d.Port)
	if a.Scope == gateway.ScopeGlobal {
		if err := x.eg.allowGlobal(ctx, rule, a.ID); err != nil {
			return nil, err
		}
		return map[string]any{"rule": rule, "scope": gateway.ScopeGlobal}, nil
	}
	if err := x.mgr.AllowEgress(ctx, a.Session, []string{rule}); err != nil {
		return nil, err
	}
	return map[string]any{"rule": rule, "scope": gateway.ScopeSandbox, "sandbox": a.Session}, nil
}

func (x *actions) widen(ctx context.Context, a gateway.Approval) (any, error) {
	rules, limits, err := api.DecodeWiden(a.Data)
	if err != nil {
		return nil, err
	}
	out := map[string]any{"sandbox": a.Session}
	if len(rules) > 0 {
		if err := x.mgr.AllowEgress(ctx, a.Session, rules); err != nil {
			return nil, err
		}
		out["egress_allow"] = rules
	}
	if limits != nil {
		if err := x.mgr.UpdateLimits(ctx, a.Session, *limits); err != nil {
			return nil, err
		}
		out["limits"] = limitsView(*limits)
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

func (x *actions) registerTool(ctx context.Context, a gateway.Approval) (any, error) {
	var t tools.Tool
	if err := json.Unmarshal(a.Data, &t); err != nil {
		return nil, fmt.Errorf("tool.register data: %w", err)
	}
	t, err := x.tools.Register(ctx, t, a.ID)
	if err != nil {
		return nil, err
	}
	return map[string]any{"tool": t.Name}, nil
}

// spawnAgent creates the agent's sandbox and starts its command in the
// background. The command's output is kept (up to 1 MiB) and written to
// AgentOutputPath in the sandbox when it ends; its end is audited.
func (x *actions) spawnAgent(ctx context.Context, a gateway.Approval) (any, error) {
	req, argv, err := api.DecodeSpawn(a.Data)
	if err != nil {
		return nil, err
	}
	if req.Labels == nil {
		req.Labels = map[string]string{}
	}
	req.Labels["ironclaw.agent"] = a.ID
	info, err := x.mgr.Create(ctx, a.RequestedBy, req)
	if err != nil {
		return nil, err
	}
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		out := &cappedBuffer{max: maxAgentOutput}
		res, err := x.mgr.Exec(context.Background(), a.RequestedBy, info.ID, sandbox.ExecRequest{Argv: argv, Stdout: out, Stderr: out})
		data := map[string]any{"approval": a.ID, "exit": res.ExitCode, "duration_ms": res.Duration.Milliseconds(), "output_bytes": out.n}
		if err != nil {
			data["error"] = err.Error()
		}
		if werr := x.mgr.WriteFile(context.Background(), "gateway", info.ID, AgentOutputPath, bytes.NewReader(out.b.Bytes()), 0o644); werr == nil {
			data["output"] = AgentOutputPath
		}
		if _, aerr := x.log.Append(context.Background(), audit.Entry{Session: info.ID, Actor: "gateway", Kind: KindAgentExit, Data: data}); aerr != nil {
			x.logf("agent %s: audit exit: %v", info.ID, aerr)
		}
	}()
	return map[string]any{"sandbox": info.ID, "output": AgentOutputPath}, nil
}

type cappedBuffer struct {
	mu  sync.Mutex
	b   bytes.Buffer
	n   int64
	max int
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += int64(len(p))
	if room := c.max - c.b.Len(); room > 0 {
		c.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// webhookSecret reads the policy's secret file, or the data dir's, made on
// first use.
func webhookSecret(dir, file string) ([]byte, error) {
	if file != "" {
		tok, err := readToken(file)
		if err != nil {
			return nil, fmt.Errorf("webhook secret: %w", err)
		}
		return []byte(tok), nil
	}
	p := filepath.Join(dir, WebhookSecretFile)
	tok, err := ensureToken(p)
	if err != nil {
		return nil, fmt.Errorf("webhook secret: %w", err)
	}
	return []byte(tok), nil
}
