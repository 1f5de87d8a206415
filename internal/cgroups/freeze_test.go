package cgroups

import (
	"context"
	"testing"
	"time"
)

// A frozen cgroup's busy loop gets no CPU time and survives to run again
// once thawed; a frozen cgroup can still be killed.
func TestFreezeReal(t *testing.T) {
	h := realHierarchy(t)
	if !h.CanFreeze() {
		t.Skip("skipping: no freezer")
	}
	c := create(t, h, "freeze", Limits{})
	startChild(t, c, nil, "/bin/sh", "-c", "read x; while :; do :; done").start(t)
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := c.Freeze(ctx); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	t.Logf("Freeze of a busy loop took %v", time.Since(start))
	if ok, err := c.Frozen(); err != nil || !ok {
		t.Fatalf("Frozen() = %v, %v after Freeze", ok, err)
	}
	if err := c.Freeze(ctx); err != nil {
		t.Fatalf("Freeze of a frozen cgroup: %v", err)
	}
	before, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	after, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if d := after.CPUUsage - before.CPUUsage; d > 5*time.Millisecond {
		t.Errorf("a frozen busy loop used %v of CPU in 500ms", d)
	}
	if pids, _ := c.Pids(); len(pids) != 1 {
		t.Errorf("Pids() while frozen = %v, want the loop", pids)
	}
	start = time.Now()
	if err := c.Thaw(); err != nil {
		t.Fatalf("Thaw: %v", err)
	}
	t.Logf("Thaw took %v", time.Since(start))
	if ok, _ := c.Frozen(); ok {
		t.Error("Frozen() after Thaw")
	}
	time.Sleep(300 * time.Millisecond)
	thawed, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if d := thawed.CPUUsage - after.CPUUsage; d < 50*time.Millisecond {
		t.Errorf("the thawed loop used only %v of CPU in 300ms", d)
	}
	if err := c.Thaw(); err != nil {
		t.Errorf("Thaw of a running cgroup: %v", err)
	}
	// Killed while frozen: Kill thaws for the signals to land.
	if err := c.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(); err != nil {
		t.Fatalf("Kill of a frozen cgroup: %v", err)
	}
	if pids, _ := c.Pids(); len(pids) != 0 {
		t.Errorf("Pids() after Kill = %v", pids)
	}
}
