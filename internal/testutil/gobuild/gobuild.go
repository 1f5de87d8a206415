// Package gobuild builds the project's commands for tests that must run
// the real binaries (the small sandbox init, the CLI) rather than the test
// binary. Only tests import it.
package gobuild

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	built = map[string]string{} // the packages' import paths -> a directory holding their binaries
	dirs  []string
)

// Commands builds the main packages pkgs (import paths such as
// "github.com/ironclaw/ironclaw/cmd/ironclaw-sandbox") with CGO_ENABLED=0
// into one fresh world-readable directory, once per test binary, and
// returns that directory; the binaries are named as go build names them.
// The directory lives until Cleanup.
func Commands(t testing.TB, pkgs ...string) string {
	t.Helper()
	key := filepath.Join(pkgs...)
	mu.Lock()
	defer mu.Unlock()
	if dir, ok := built[key]; ok {
		return dir
	}
	dir, err := os.MkdirTemp("", "ironclaw-gobuild-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goTool(), append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("go build %v: %v\n%s", pkgs, err, out)
	}
	built[key] = dir
	dirs = append(dirs, dir)
	return dir
}

// Cleanup removes every directory Commands made; TestMain calls it after
// m.Run.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	for _, d := range dirs {
		os.RemoveAll(d)
	}
	dirs, built = nil, map[string]string{}
}

// goTool is the go command: on PATH, else where the official tarball
// puts it.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}
