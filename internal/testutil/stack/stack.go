// Package stack builds, for tests, the daemon's lower layers on real parts:
// a native runtime, a SQLite store in a temp dir and an audit log, each closed
// when the test ends. Only tests import it; their TestMain must still call
// boot.Main when boot.IsInit.
package stack

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
	"github.com/ironclaw/ironclaw/internal/store"
)

// Stack is a runtime, a store and an audit log.
type Stack struct {
	Runtime *native.Runtime
	Store   *store.Store
	Log     *audit.Log
}

// New builds a Stack. It skips the test when the host cannot run
// sandboxes, unless IRONCLAW_REQUIRE_SANDBOX=1 (CI), where that fails it.
// The runtime's init and steward are sandboxtest.NativeOptions', as a
// daemon beside `make build`'s binaries has them (the steward, started as
// the init), unless opts names a steward of its own;
// IRONCLAW_TEST_INIT_EXE names a cgo-free init binary for -race builds.
func New(t testing.TB, opts native.Options) *Stack {
	t.Helper()
	n := sandboxtest.NativeOptions()
	opts.Exe = n.Exe
	if opts.Steward == "" {
		opts.Steward, opts.StewardAfter = n.Steward, n.StewardAfter
		opts.GoInit = opts.GoInit || n.GoInit
	}
	rt, err := native.New(context.Background(), opts)
	if err != nil {
		if os.Getenv("IRONCLAW_REQUIRE_SANDBOX") != "1" && errors.Is(err, sandbox.ErrUnsupported) {
			t.Skipf("no sandboxes on this host: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	// As the daemon opens it, so benchmarks commit into a presized WAL.
	db, err := store.OpenWith(context.Background(), filepath.Join(t.TempDir(), "ironclaw.db"), store.Options{PresizeWAL: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	log, err := audit.New(context.Background(), db, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	return &Stack{Runtime: rt, Store: db, Log: log}
}
