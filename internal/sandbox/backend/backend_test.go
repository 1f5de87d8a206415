package backend_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/backend"
)

// TestOpenRefusesAnUnknownSandboxInit: a misspelt IRONCLAW_SANDBOX_INIT
// is an error naming the variable, not a silent default.
func TestOpenRefusesAnUnknownSandboxInit(t *testing.T) {
	t.Setenv(backend.SandboxInitEnv, "golang")
	rt, err := backend.Open(context.Background(), backend.Options{Name: backend.Native, Exe: "/proc/self/exe"})
	if err == nil {
		rt.Close(context.Background())
		t.Fatal("opened")
	}
	if !errors.Is(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), backend.SandboxInitEnv) {
		t.Fatalf("err = %v", err)
	}
}
