package native_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

// TestSharedAlternatives: in root mode every sandbox of a runtime binds
// one read-only tmpfs holding the view's alternatives links (the same
// superblock in each), which nothing inside can write; the links are the
// host's. Rootless, each sandbox makes its own.
func TestSharedAlternatives(t *testing.T) {
	var mu sync.Mutex
	var logged []string
	rt := sandboxtest.NewNative(t, native.Options{Logf: func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, fmt.Sprintf(f, a...))
	}})
	const probe = `set -e
name=$(ls /etc/alternatives | head -n 1)
[ -n "$name" ] || { echo none; exit 0; }
echo "$name"
readlink "/etc/alternatives/$name"
stat -c %d /etc/alternatives
awk '$5 == "/etc/alternatives" { for (i = 7; i < NF; i++) if ($i == "-") { print $(i + 1), $6; exit } }' /proc/self/mountinfo
if touch /etc/alternatives/x 2>/dev/null; then echo writable; else echo refused; fi`
	var devs []string
	for i := range 2 {
		b := sandboxtest.New(t, rt, sandbox.Spec{})
		lines := sandboxtest.Lines(b.Sh(probe).Stdout)
		if len(lines) == 1 && lines[0] == "none" {
			t.Skip("the host view has no alternatives links")
		}
		rootMode := os.Geteuid() == 0
		if want := 5; !rootMode {
			want = 4 // no mount of its own
			if len(lines) != want {
				t.Fatalf("sandbox %d: %q", i, lines)
			}
		} else if len(lines) != want {
			t.Fatalf("sandbox %d: %q, want name, target, device, mount, write", i, lines)
		}
		host, err := os.Readlink(filepath.Join("/etc/alternatives", lines[0]))
		if err != nil || host != lines[1] {
			t.Fatalf("sandbox %d: %s -> %s, the host's -> %s (%v)", i, lines[0], lines[1], host, err)
		}
		if lines[len(lines)-1] != "refused" {
			t.Fatalf("sandbox %d: its /etc/alternatives is writable", i)
		}
		if !rootMode {
			continue
		}
		if f := strings.Fields(lines[3]); len(f) != 2 || f[0] != "tmpfs" || !strings.HasPrefix(f[1], "ro,") {
			t.Fatalf("sandbox %d: /etc/alternatives is mounted %q, want a read-only tmpfs", i, lines[3])
		}
		devs = append(devs, lines[2])
	}
	if len(devs) == 2 && devs[0] != devs[1] {
		t.Errorf("the two sandboxes' alternatives are on devices %s and %s, want one shared mount", devs[0], devs[1])
	}
	mu.Lock()
	defer mu.Unlock()
	for _, l := range logged {
		if strings.Contains(l, "alternatives:") {
			t.Errorf("logged: %s", l)
		}
	}
}
