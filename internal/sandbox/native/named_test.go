package native_test

import (
	"context"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

// CreateNamed names a cold create's sandbox before building it (from a
// clone, or from a spare init), with the id it returns, once; a sandbox
// from the warm pool is not named.
func TestCreateNamedNamesColdCreatesOnce(t *testing.T) {
	sandboxtest.Native(t)
	ctx := context.Background()
	check := func(t *testing.T, r *native.Runtime, wantNamed bool) {
		t.Helper()
		var heard []string
		sb, err := r.CreateNamed(ctx, sandbox.Spec{}, func(id string) { heard = append(heard, id) })
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Destroy(ctx)
		switch {
		case !wantNamed && len(heard) != 0:
			t.Fatalf("a pooled sandbox was named %v", heard)
		case wantNamed && (len(heard) != 1 || heard[0] != sb.ID()):
			t.Fatalf("named %v, the sandbox is %s", heard, sb.ID())
		}
		if res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
			t.Fatalf("exec: %+v %v", res, err)
		}
	}
	t.Run("clone", func(t *testing.T) {
		check(t, sandboxtest.NewNative(t, native.Options{}), true)
	})
	t.Run("spare-init", func(t *testing.T) {
		r := sandboxtest.NewNative(t, native.Options{SpareInits: 1})
		if !r.HasSteward() {
			t.Skip("skipping: spare inits need the steward's C init")
		}
		waitSpareInits(t, r, 1)
		check(t, r, true)
	})
	t.Run("pool", func(t *testing.T) {
		r := sandboxtest.NewNative(t, native.Options{PoolSize: 1})
		waitPool(t, r, 1)
		check(t, r, false)
	})
}
