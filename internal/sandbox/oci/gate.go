package oci

import (
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/container"
	"github.com/ironclaw/ironclaw/internal/sandbox/gate"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// planGate resolves the spec's gated programs in its root (see package
// gate): the bundle binds their stubs over every path, and the agent gets
// the real files once it connects. The caller closes the plan.
func (b *Sandbox) planGate() (*gate.Plan, error) {
	plan, err := container.PlanGate(b.spec)
	if err != nil || plan == nil {
		return nil, err
	}
	b.b.gate = plan
	b.gateSock = container.GateSock()
	return plan, nil
}

// execArgv is the helper invocation for req: the exec front, or, for an
// approved exec of a gated program (req.Gate), the gate front once the
// agent is armed with the run. disarm is called when the exec has ended.
func (b *Sandbox) execArgv(nonce string, params container.ExecParams, req sandbox.ExecRequest) (argv []string, disarm func(), err error) {
	if req.Gate == "" || b.gateSock == "" {
		return container.ExecArgv(nonce, b.nproc(), params.Cwd, req.Argv), func() {}, nil
	}
	arm, dis, err := container.ArmLine(nonce, wire.Armed{Key: req.Gate, Argv: req.Argv, Cwd: params.Cwd,
		Env: container.MergeEnv(container.BaseEnv, b.spec.Env, req.Env), NProc: uint64(b.nproc()), Readable: b.rt.opts.Runtime == Runsc})
	if err != nil {
		return nil, nil, err
	}
	b.tellAgent(arm)
	return container.GateExecArgv(nonce, b.gateSock), func() { b.tellAgent(dis) }, nil
}
