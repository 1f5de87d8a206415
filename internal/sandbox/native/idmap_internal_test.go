package native

import (
	"fmt"
	"math/bits"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
)

func TestSandboxIDMaps(t *testing.T) {
	root := sandboxIDMaps(false, 100000)
	if root.uid != "0 100000 65536\n" || root.gid != "0 100000 65536\n" || root.setgroups != "allow" {
		t.Errorf("root mode: %+v", root)
	}
	rootless := sandboxIDMaps(true, 100000)
	if want := fmt.Sprintf("%d %d 1\n", sandbox.UID, os.Getuid()); rootless.uid != want {
		t.Errorf("rootless uid map %q, want %q", rootless.uid, want)
	}
	if want := fmt.Sprintf("%d %d 1\n", sandbox.GID, os.Getgid()); rootless.gid != want {
		t.Errorf("rootless gid map %q, want %q", rootless.gid, want)
	}
	if rootless.setgroups != "deny" {
		t.Errorf("rootless setgroups %q: an unprivileged gid map needs deny", rootless.setgroups)
	}
}

// TestBoundingCaps: the ambient set an init is cloned with is this
// process's bounding set, bit for bit.
func TestBoundingCaps(t *testing.T) {
	caps, err := boundingCaps()
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var set uint64
	for line := range strings.Lines(string(status)) {
		if hex, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			if set, err = strconv.ParseUint(strings.TrimSpace(hex), 16, 64); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(caps) != bits.OnesCount64(set) {
		t.Fatalf("%d capabilities for CapBnd %x", len(caps), set)
	}
	for _, c := range caps {
		if set&(1<<c) == 0 {
			t.Errorf("capability %d is not in the bounding set %x", c, set)
		}
	}
}
