package sandboxtest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/ironclaw/ironclaw/internal/sandbox/inside/steward"
)

// Steward is the steward binary the tests' native runtimes use, and why
// there is none: IRONCLAW_TEST_STEWARD names one ("off": none); unset,
// it is compiled from steward.Source with cc, once per machine and
// source (kept in the temporary directory under the source's hash).
var Steward = sync.OnceValues(func() (string, error) {
	switch v := os.Getenv("IRONCLAW_TEST_STEWARD"); v {
	case "off":
		return "", fmt.Errorf("IRONCLAW_TEST_STEWARD=off")
	case "":
	default:
		return v, nil
	}
	h := sha256.New()
	for _, b := range [][]byte{steward.Source, steward.SetupSource, steward.Header} {
		h.Write(b)
	}
	sum := h.Sum(nil)
	out := filepath.Join(os.TempDir(), "ironclaw-steward-"+hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		return "", fmt.Errorf("no C compiler to build the steward with: %w", err)
	}
	dir, err := os.MkdirTemp("", "ironclaw-steward-build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	src, setupSrc := filepath.Join(dir, "steward.c"), filepath.Join(dir, "setup.c")
	for name, b := range map[string][]byte{src: steward.Source, setupSrc: steward.SetupSource, filepath.Join(dir, "steward.h"): steward.Header} {
		if err := os.WriteFile(name, b, 0o644); err != nil {
			return "", err
		}
	}
	// The flags of make build's STEWARD_CFLAGS.
	bin := filepath.Join(dir, "steward")
	cmd := exec.Command(cc, "-O2", "-static", "-s", "-Wall", "-Wextra", "-Werror", "-D_FORTIFY_SOURCE=2", "-fstack-protector-strong", "-o", bin, src, setupSrc)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the steward: %v: %s", err, b)
	}
	// Renamed into place, so a concurrent test binary never runs half a file.
	if err := os.Rename(bin, out); err != nil {
		return "", err
	}
	return out, nil
})
