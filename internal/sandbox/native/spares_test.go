package native_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

func waitSpares(t testing.TB, r *native.Runtime, n int) {
	t.Helper()
	waitStock(t, "spare cgroups", r.SparesIdle, n)
}

// ourCgroupIDs lists the sandbox ids this process's sandbox cgroups are
// named for, in every hierarchy.
func ourCgroupIDs(t testing.TB) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	prefix := fmt.Sprintf("ic-%d.", os.Getpid())
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.HasPrefix(d.Name(), prefix) {
			if i := strings.Index(d.Name(), "-sbx-"); i > 0 {
				ids[d.Name()[i+1:]] = true
			}
			return filepath.SkipDir
		}
		return nil
	})
	return ids
}

// newCgroupIDs returns the ids of this process's sandbox cgroups that are
// not in before, failing unless there are want of them.
func newCgroupIDs(t testing.TB, before map[string]bool, want int) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for id := range ourCgroupIDs(t) {
		if !before[id] {
			ids[id] = true
		}
	}
	if len(ids) != want {
		t.Fatalf("%d new sandbox cgroups, want %d: %v", len(ids), want, ids)
	}
	return ids
}

// cgroupValue reads file from the cgroup of sandbox id (or its child
// sub, if not ""), in whichever hierarchy holds it.
func cgroupValue(t testing.TB, id, sub, file string) string {
	t.Helper()
	var val string
	found := false
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || found {
			return nil
		}
		if strings.HasSuffix(d.Name(), "-"+id) {
			if b, err := os.ReadFile(filepath.Join(p, sub, file)); err == nil {
				val, found = strings.TrimSpace(string(b)), true
			}
			return filepath.SkipDir
		}
		return nil
	})
	if !found {
		t.Fatalf("no %s in a cgroup of %s", filepath.Join(sub, file), id)
	}
	return val
}

// A cold create (a spec the pool cannot serve) takes a spare cgroup made
// ahead, with the spec's limits in force, not the spares' defaults; the
// spares refill, and Close removes the ones left. How many are idle right
// after a take is not checked: the refill may already have begun.
func TestSpareCgroupsServeColdCreates(t *testing.T) {
	sandboxtest.Native(t)
	before := cgroupCount(t)
	beforeIDs := ourCgroupIDs(t)
	r := sandboxtest.NewNative(t, native.Options{SpareCgroups: 2})
	waitSpares(t, r, 2)
	spares := newCgroupIDs(t, beforeIDs, 2)
	ctx := context.Background()
	// A loopback port makes the spec one the pool could not serve: the
	// create is cold whatever the pool holds.
	spec := sandbox.Spec{Network: sandbox.Network{LoopbackTCP: []uint16{9000}},
		Limits: sandbox.Limits{MemoryBytes: 768 << 20, Pids: 40}}
	sb, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	if !spares[sb.ID()] {
		t.Fatalf("sandbox %s was not made from a spare (%v)", sb.ID(), spares)
	}
	if v := cgroupValue(t, sb.ID(), "", memoryLimitFile()); v != fmt.Sprint(768<<20) {
		t.Errorf("memory limit %s, want %d (the spec's, not the spare's)", v, 768<<20)
	}
	var out bytes.Buffer
	res, _ := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", "i=0; while [ $i -lt 60 ]; do sleep 3 & i=$((i+1)); done 2>&1 | head -1"}, Stdout: &out, Stderr: &out})
	if res.ExitCode == 0 && !strings.Contains(out.String(), "fork") && !strings.Contains(out.String(), "unavailable") {
		t.Fatalf("60 processes under pids=40 from a spare cgroup: %q", out.String())
	}
	out.Reset()
	if res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"echo", "ok"}, Stdout: &out}); err != nil || res.ExitCode != 0 || out.String() != "ok\n" {
		t.Fatalf("exec in a sandbox from a spare: %v %+v %q", err, res, out.String())
	}
	// A default-limited cold create takes a spare too, its limits
	// untouched: one whose cgroup was there before the create (the
	// spares are refilled first, so that none is being made meanwhile;
	// the refill after the first take waits refillQuiet, which a cold
	// create on a busy host can outlast).
	waitSpares(t, r, 2)
	ready := ourCgroupIDs(t)
	sb2, err := r.Create(ctx, sandbox.Spec{Network: sandbox.Network{LoopbackTCP: []uint16{9001}}})
	if err != nil {
		t.Fatal(err)
	}
	if !ready[sb2.ID()] || sb2.ID() == sb.ID() {
		t.Fatalf("second sandbox %s was not made from a spare (%v)", sb2.ID(), ready)
	}
	if v, want := cgroupValue(t, sb2.ID(), "", memoryLimitFile()), fmt.Sprint(sandbox.DefaultLimits.MemoryBytes); v != want {
		t.Errorf("memory limit %s, want the default %s", v, want)
	}
	sb2.Destroy(ctx)
	// None left: the refill starts at once.
	waitSpares(t, r, 2)
	sb.Destroy(ctx)
	r.Close(ctx)
	if after := cgroupCount(t); after != before {
		t.Fatalf("spares left cgroups: %d before, %d after Close", before, after)
	}
}

// memoryLimitFile is the memory limit's file on this host's hierarchy.
func memoryLimitFile() string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return "memory.max"
	}
	return "memory.limit_in_bytes"
}
