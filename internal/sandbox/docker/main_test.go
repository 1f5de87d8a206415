package docker_test

import (
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

// The test binary is also the in-sandbox helper: every sandbox binds it at
// wire.HelperPath, as the daemon binds itself, and sandboxtest.Main runs
// the helper's modes first.
func TestMain(m *testing.M) { sandboxtest.Main(m) }
