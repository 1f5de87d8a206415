package daemon

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/gateway"
	"github.com/ironclaw/ironclaw/internal/gateway/kinds"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/secrets"
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

// actions are what approved requests do: package kinds carries out each
// kind's payload through the session manager, the egress broker's global
// list and the tool registry; this type adds the background run of a
// spawned agent's command.
type actions struct {
	mgr   *session.Manager
	eg    *egressAccess // nil without a broker
	tools *tools.Registry
	// secrets carries out secret.use approvals; nil without secrets
	secrets *secrets.Grants
	log     *audit.Log
	logf    func(string, ...any)
	wg      sync.WaitGroup // spawned agents' commands
}

func (x *actions) table() map[string]gateway.Action {
	env := kinds.Env{Agents: x}
	if x.mgr != nil {
		env.Sandboxes = x.mgr
	}
	if x.eg != nil {
		env.Egress = globalEgress{x.eg}
	}
	if x.tools != nil {
		env.Tools = x.tools
	}
	if x.secrets != nil {
		env.Secrets = x.secrets
	}
	return gateway.Actions(env)
}

// globalEgress adds approved rules to every sandbox's list.
type globalEgress struct{ e *egressAccess }

func (g globalEgress) AllowGlobal(ctx context.Context, rule, approval string) error {
	return g.e.allowGlobal(ctx, rule, approval)
}

// StartAgent runs a spawned agent's command in its sandbox in the
// background. The command's output is kept (up to 1 MiB) and written to
// AgentOutputPath in the sandbox when it ends; its end is audited.
func (x *actions) StartAgent(approval, principal, sandboxID string, argv []string) string {
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		out := &cappedBuffer{max: maxAgentOutput}
		res, err := x.mgr.Exec(context.Background(), principal, sandboxID, sandbox.ExecRequest{Argv: argv, Stdout: out, Stderr: out})
		data := map[string]any{"approval": approval, "exit": res.ExitCode, "duration_ms": res.Duration.Milliseconds(), "output_bytes": out.n}
		if err != nil {
			data["error"] = err.Error()
		}
		if werr := x.mgr.WriteFile(context.Background(), "gateway", sandboxID, AgentOutputPath, bytes.NewReader(out.b.Bytes()), 0o644); werr == nil {
			data["output"] = AgentOutputPath
		}
		if _, aerr := x.log.Append(context.Background(), audit.Entry{Session: sandboxID, Actor: "gateway", Kind: KindAgentExit, Data: data}); aerr != nil {
			x.logf("agent %s: audit exit: %v", sandboxID, aerr)
		}
	}()
	return AgentOutputPath
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
