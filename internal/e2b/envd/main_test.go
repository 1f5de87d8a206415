package envd_test

import (
	"testing"

	"github.com/ironclaw/ironclaw/internal/e2b/e2btest"
)

func TestMain(m *testing.M) { e2btest.Main(m) }
