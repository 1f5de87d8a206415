package docker

import (
	"io"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/container"
	"github.com/ironclaw/ironclaw/internal/sandbox/gate"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// planGate resolves the spec's gated programs in its root (see package
// gate), as the oci backend does: the container binds their stubs over
// every path, and the agent gets the real files once it connects. The
// caller closes the plan.
func (b *Sandbox) planGate() (*gate.Plan, error) {
	plan, err := container.PlanGate(b.spec)
	if err != nil || plan == nil {
		return nil, err
	}
	b.st.gate = plan
	b.gateSock = container.GateSock()
	return plan, nil
}

// execArgv is the helper invocation for req: the exec front, or, for an
// approved exec of a gated program (req.Gate), the gate front once the
// agent is armed with the run. disarm is called when the exec has ended.
func (b *Sandbox) execArgv(nonce string, nproc int64, params container.ExecParams, req sandbox.ExecRequest) (argv []string, disarm func(), err error) {
	if req.Gate == "" || b.gateSock == "" {
		return container.ExecArgv(nonce, nproc, params.Cwd, req.Argv), func() {}, nil
	}
	// What the exec would see: the container's environment, dockerd's
	// HOSTNAME, the Spec's and the request's.
	env := container.MergeEnv(container.BaseEnv, []string{"HOSTNAME=" + b.spec.Hostname}, b.spec.Env, req.Env)
	arm, dis, err := container.ArmLine(nonce, wire.Armed{Key: req.Gate, Argv: req.Argv, Cwd: params.Cwd, Env: env,
		NProc: uint64(nproc), Readable: b.rt.runsc})
	if err != nil {
		return nil, nil, err
	}
	b.tellAgent(arm)
	return container.GateExecArgv(nonce, b.gateSock), func() { b.tellAgent(dis) }, nil
}

// tellAgent sends one control line to the agent.
func (b *Sandbox) tellAgent(line string) {
	b.ctlMu.Lock()
	defer b.ctlMu.Unlock()
	if b.ctl != nil {
		_ = b.ctl.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(b.ctl, line+"\n")
	}
}
