package native

import (
	"strings"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/gate"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// gateConfig resolves the spec's gated programs in the root cfg plans
// (package gate) and tells the init what to mask. The init opens the real
// files itself, inside the sandbox, and checks they are the ones found
// here; the daemon keeps nothing open.
func gateConfig(spec sandbox.Spec, cfg *wire.Config) error {
	if len(spec.Gate) == 0 {
		return nil
	}
	plan, err := gate.Resolve(gate.ViewOf(&cfg.Seal, spec), spec.Gate)
	if err != nil {
		return err
	}
	defer plan.Close()
	if err := plan.CheckFDs(spec.Limits.OpenFiles); err != nil {
		return err
	}
	for _, g := range plan.Programs {
		cfg.Gate = append(cfg.Gate, wire.GateProgram{Keys: g.Keys, Paths: g.Paths, Dev: g.Dev, Ino: g.Ino, Stub: gate.Stub(g.Keys[0])})
	}
	return nil
}

// isPATH reports whether an env entry sets PATH, which a pooled sandbox's
// gate did not see when it was resolved.
func isPATH(kv string) bool { return strings.HasPrefix(kv, "PATH=") }
