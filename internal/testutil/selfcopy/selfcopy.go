// Package selfcopy gives tests a copy of their own binary that any user may
// execute: `go test` builds into a directory only root can enter, and some
// tests must start themselves as an unprivileged user. Only tests import it.
package selfcopy

import (
	"os"
	"path/filepath"
	"testing"
)

// Path returns the path of a copy of the running test binary in a fresh
// world-readable directory that is removed when the test ends.
func Path(t testing.TB, name string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ironclaw-selfcopy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, name)
	if err := os.WriteFile(exe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return exe
}
