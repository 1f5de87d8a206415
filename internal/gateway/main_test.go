package gateway

import (
	"testing"

	"github.com/ironclaw/ironclaw/internal/testutil/leakcheck"
)

// TestMain fails the run if a test leaves a goroutine behind (a waiter, a
// webhook sender, an expiry timer's worker).
func TestMain(m *testing.M) { leakcheck.Main(m) }
