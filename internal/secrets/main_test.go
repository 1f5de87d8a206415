package secrets

import (
	"testing"

	"github.com/ironclaw/ironclaw/internal/testutil/leakcheck"
)

// TestMain fails the run if a test leaves a goroutine behind.
func TestMain(m *testing.M) { leakcheck.Main(m) }
