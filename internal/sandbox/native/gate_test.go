package native_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/conformance"
	"github.com/ironclaw/ironclaw/internal/sandbox/gate"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

// A gated program cannot run without an approval, however it is spelled;
// an approved exec runs exactly its argv as the real program, and nothing
// else in the sandbox can copy the program while it runs.
func TestHostileExecGate(t *testing.T) {
	conformance.RunGate(t, sandboxtest.Native(t))
}

// A pooled sandbox is never handed out for a spec whose gate it was not
// made with; one made with the daemon's gate (PoolGate) is gated.
func TestHostileExecGatePool(t *testing.T) {
	sandboxtest.Native(t)
	for _, poolGate := range [][]string{nil, {"tac"}} {
		r, err := native.New(context.Background(), native.Options{PoolSize: 1, PoolGate: poolGate, Exe: os.Getenv("IRONCLAW_TEST_INIT_EXE")})
		if err != nil {
			t.Fatal(err)
		}
		waitPool(t, r, 1)
		// The pooled sandbox's cgroup is there before the create: whether
		// the create took it does not depend on how soon the pool refills.
		pooled := ourCgroupIDs(t)
		sb, err := r.Create(context.Background(), sandbox.Spec{Gate: []string{"tac"}})
		if err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"tac", "/etc/hostname"}, Stdout: &out, Stderr: &errb})
		if err != nil || res.ExitCode != gate.StubExit || out.Len() != 0 || !strings.Contains(errb.String(), "tac needs approval") {
			t.Errorf("pool gate %v: tac ran: %v, exit %d, %q %q", poolGate, err, res.ExitCode, out.String(), errb.String())
		}
		if fromPool := pooled[sb.ID()]; fromPool != (poolGate != nil) {
			t.Errorf("pool gate %v: taken from the pool: %v", poolGate, fromPool)
		}
		sb.Destroy(context.Background())
		r.Close(context.Background())
	}
}
