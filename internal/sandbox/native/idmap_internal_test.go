package native

import (
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"golang.org/x/sys/unix"
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
// process's bounding set, capability for capability, as the kernel
// answers PR_CAPBSET_READ.
func TestBoundingCaps(t *testing.T) {
	caps, err := boundingCaps()
	if err != nil {
		t.Fatal(err)
	}
	var want []uintptr
	for c := range uintptr(64) {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, c, 0, 0, 0)
		if err != nil {
			break // past the kernel's last capability
		}
		if in == 1 {
			want = append(want, c)
		}
	}
	if !slices.Equal(caps, want) {
		t.Fatalf("boundingCaps %v, the kernel's bounding set %v", caps, want)
	}
}
