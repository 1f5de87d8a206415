package container

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/gate"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

// The daemon's side of the gate on the container backends (see package
// gate and helper's gate.go): resolve the gated programs in the root the
// backend builds, write their stubs for the runtime to bind over every
// path, hand the agent the real programs, and arm each approved exec.

// PlanGate resolves spec.Gate in the root of spec's seal sl (nil plan,
// nil error when nothing is gated). The caller closes the plan once the
// agent has the real files.
func PlanGate(spec sandbox.Spec, sl *seal.Seal) (*gate.Plan, error) {
	if len(spec.Gate) == 0 {
		return nil, nil
	}
	plan, err := gate.Resolve(gate.ViewOf(sl, spec), spec.Gate)
	if err != nil {
		return nil, err
	}
	if err := plan.CheckFDs(spec.Limits.OpenFiles); err != nil {
		plan.Close()
		return nil, err
	}
	return plan, nil
}

// StubBind is one read-only bind of a stub over a gated path.
type StubBind struct {
	Host, Inside string
}

// WriteStubs writes one stub per program of plan into dir (made 0755; each
// stub 0555, so the container's mapped root may read it) and returns the
// binds the runtime must make, after the root's own.
func WriteStubs(dir string, plan *gate.Plan) ([]StubBind, error) {
	if plan == nil || len(plan.Programs) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var out []StubBind
	for i, g := range plan.Programs {
		p := filepath.Join(dir, strconv.Itoa(i))
		if err := os.WriteFile(p, gate.Stub(g.Keys[0]), 0o555); err != nil {
			return nil, err
		}
		if err := os.Chmod(p, 0o555); err != nil {
			return nil, err
		}
		for _, in := range g.Paths {
			out = append(out, StubBind{Host: p, Inside: in})
		}
	}
	return out, nil
}

// GateSock is a fresh name for the agent's gate socket (abstract, in the
// sandbox's own network namespace).
func GateSock() string { return "ironclaw-gate-" + RandHex(8) }

// SendGate is the daemon's first message to a just-connected agent: the
// gated programs (none when plan is nil) with their real files beside it,
// and the socket to serve approved runs on.
func SendGate(ctl net.Conn, plan *gate.Plan, sock string) error {
	hello := wire.GateHello{}
	var fds []int
	if plan != nil && len(plan.Programs) > 0 {
		hello.Sock = sock
		for _, g := range plan.Programs {
			hello.Programs = append(hello.Programs, wire.GateProgram{Keys: g.Keys, Paths: g.Paths})
			fds = append(fds, int(g.File().Fd()))
		}
	}
	b, err := json.Marshal(hello)
	if err != nil {
		return err
	}
	uc, ok := ctl.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("the agent's connection is not a unix socket")
	}
	_ = uc.SetWriteDeadline(time.Now().Add(30 * time.Second))
	defer uc.SetWriteDeadline(time.Time{})
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	msg := append([]byte(wire.MsgGate+" "), append(b, '\n')...)
	n, _, err := uc.WriteMsgUnix(msg, oob, nil)
	if err == nil && n < len(msg) {
		_, err = uc.Write(msg[n:])
	}
	if err != nil {
		return fmt.Errorf("sending the gate to the agent: %w", err)
	}
	return nil
}

// maxArm bounds an arm line, well within what the agent reads in one.
const maxArm = 512 << 10

// ArmLine is the control line that arms an approved exec (wire.MsgArm),
// and the one that disarms it.
func ArmLine(nonce string, a wire.Armed) (arm, disarm string, err error) {
	b, err := json.Marshal(a)
	if err != nil {
		return "", "", err
	}
	arm = wire.MsgArm + " " + nonce + " " + string(b)
	if len(arm) > maxArm {
		return "", "", fmt.Errorf("%w: the command and its environment are too large for an approved run", sandbox.ErrInvalidRequest)
	}
	return arm, wire.MsgDisarm + " " + nonce, nil
}

// GateExecArgv is the helper invocation that fronts an approved exec (the
// agent starts the command; nonce marks the header lines as for ExecArgv).
func GateExecArgv(nonce, sock string) []string {
	return []string{wire.HelperPath, wire.ModeGateExec, nonce, sock}
}
