package native_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

func newPooledRuntime(t testing.TB, size int) *native.Runtime {
	t.Helper()
	sandboxtest.Native(t) // skip or fail like every sandbox test
	// With the steward and the C init, as the daemon's pool runs.
	r := sandboxtest.NewNative(t, native.Options{PoolSize: size})
	waitPool(t, r, size)
	return r
}

func waitPool(t testing.TB, r *native.Runtime, n int) {
	t.Helper()
	waitStock(t, "pooled sandboxes", r.PoolIdle, n)
}

// waitStock waits up to 30s for idle() to reach n.
func waitStock(t testing.TB, what string, idle func() int, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for idle() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d %s after 30s", idle(), n, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestPoolTakesAndAppliesSpec(t *testing.T) {
	before := cgroupCount(t)
	r := newPooledRuntime(t, 2)
	ctx := context.Background()
	// A memory limit from which the default tmpfs sizes still fit: smaller
	// ones would shrink them, which needs a sandbox of its own.
	spec := sandbox.Spec{Env: []string{"FROM_SPEC=yes"}, Cwd: "/tmp", Limits: sandbox.Limits{MemoryBytes: 768 << 20, Pids: 40}}
	sb, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	if r.PoolIdle() != 1 {
		t.Fatalf("pool idle = %d after one take, want 1 (the sandbox came from the pool)", r.PoolIdle())
	}
	var out bytes.Buffer
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", "pwd; echo $FROM_SPEC; cat /proc/self/status | grep -c ."}, Stdout: &out})
	if err != nil || res.ExitCode != 0 || !strings.HasPrefix(out.String(), "/tmp\nyes\n") {
		t.Fatalf("pooled sandbox: %q %v", out.String(), err)
	}
	// The taken sandbox has the spec's limits, not the pool's.
	out.Reset()
	res, _ = sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", "i=0; while [ $i -lt 60 ]; do sleep 3 & i=$((i+1)); done 2>&1 | head -1"}, Stdout: &out, Stderr: &out})
	if !strings.Contains(out.String(), "fork") && !strings.Contains(out.String(), "unavailable") {
		t.Fatalf("60 processes under pids=40: %q", out.String())
	}
	// A spec of another shape is created cold and leaves the pool alone.
	waitPool(t, r, 2)
	other, err := r.Create(ctx, sandbox.Spec{Network: sandbox.Network{LoopbackTCP: []uint16{9000}}})
	if err != nil {
		t.Fatal(err)
	}
	other.Destroy(ctx)
	if r.PoolIdle() != 2 {
		t.Fatalf("a non-default spec took from the pool")
	}
	sb.Destroy(ctx)
	r.Close(ctx)
	if after := cgroupCount(t); after != before {
		t.Fatalf("pool left cgroups: %d before, %d after Close", before, after)
	}
}
