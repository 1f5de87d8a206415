package native_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

// Every sandbox is born in its own cgroups and cgroup namespace (cloned
// into them on v2; on v1 forked by a daemon thread that steps inside for
// the fork), its commands are forked in the pids workload child (v1), and
// no thread of the daemon is left in a sandbox's cgroup afterwards.
func TestInitBornInItsCgroup(t *testing.T) {
	r := sandboxtest.Native(t)
	for i := range 3 {
		b := sandboxtest.New(t, r, sandbox.Spec{})
		o := b.Run(nil, "cat", "/proc/self/cgroup")
		for _, l := range sandboxtest.Lines(o.Stdout) {
			f := strings.SplitN(l, ":", 3)
			if len(f) != 3 {
				t.Fatalf("sandbox %d: /proc/self/cgroup line %q", i, l)
			}
			ctl, path := f[1], f[2]
			switch {
			case ctl == "pids" && path == "/workload", ctl == "" && path == "/":
			case ctl == "pids":
				t.Errorf("sandbox %d: a command runs at %q in the pids hierarchy, want /workload", i, path)
			case strings.Contains(ctl, "memory"), strings.Contains(ctl, "cpu"), strings.Contains(ctl, "freezer"):
				if path != "/" {
					t.Errorf("sandbox %d: %s at %q: the sandbox's cgroup namespace is not rooted at its cgroup", i, ctl, path)
				}
			}
		}
	}
	leader, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := filepath.Glob("/proc/self/task/*/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range tasks {
		got, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited
		}
		if string(got) != string(leader) {
			t.Errorf("%s differs from the process's cgroups:\n%s\nwant\n%s", p, got, leader)
		}
	}
}
