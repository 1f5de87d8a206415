package envd_test

import (
	"testing"

	"connectrpc.com/connect"

	"github.com/ironclaw/ironclaw/internal/e2b/e2btest"
)

func TestMain(m *testing.M) { e2btest.Main(m) }

// wantCode fails the test unless err is a Connect error with code.
func wantCode(t *testing.T, what string, err error, code connect.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %v", what, code)
	}
	if got := connect.CodeOf(err); got != code {
		t.Fatalf("%s: %v (%v), want %v", what, got, err, code)
	}
}
