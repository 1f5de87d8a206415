package docker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/docker"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

// A paused Docker sandbox's busy loop gets (almost) no CPU, its process and
// files survive, and a paused one is destroyed cleanly.
func TestPause(t *testing.T) {
	b := sandboxtest.New(t, sandboxtest.Docker(t), sandbox.Spec{})
	pauseCheck(t, b, b.SB.(*docker.Sandbox))
}

type pauser interface {
	Pause(context.Context) error
	Resume(context.Context) error
}

func pauseCheck(t *testing.T, b *sandboxtest.Box, sb pauser) {
	b.Sh("echo kept > /tmp/keep")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loop := make(chan sandboxtest.Output, 1)
	go func() {
		loop <- b.ExecCtx(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo $$ > /tmp/loop.pid; while :; do :; done"}})
	}()
	deadline := time.Now().Add(20 * time.Second)
	for b.Sh("cat /tmp/loop.pid 2>/dev/null").Stdout == "" {
		if time.Now().After(deadline) {
			t.Fatal("the loop did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer pcancel()
	start := time.Now()
	if err := sb.Pause(pctx); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	t.Logf("Pause took %v", time.Since(start))
	if err := sb.Pause(pctx); err != nil {
		t.Errorf("Pause of a paused sandbox: %v", err)
	}
	before, err := b.SB.Stats(pctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	after, err := b.SB.Stats(pctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CPU used while paused for 500ms: %v", after.CPUUsage-before.CPUUsage)
	if d := after.CPUUsage - before.CPUUsage; d > 25*time.Millisecond {
		t.Errorf("a paused sandbox used %v of CPU in 500ms", d)
	}
	start = time.Now()
	if err := sb.Resume(pctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	t.Logf("Resume took %v", time.Since(start))
	if err := sb.Resume(pctx); err != nil {
		t.Errorf("Resume of a running sandbox: %v", err)
	}
	o := b.Sh(`cat /tmp/keep; kill -0 "$(cat /tmp/loop.pid)" && echo alive`)
	if got := strings.Fields(o.Stdout); len(got) != 2 || got[0] != "kept" || got[1] != "alive" {
		t.Errorf("after Resume: %q, want the file and the loop", o.Stdout)
	}
	if err := sb.Pause(pctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	start = time.Now()
	if err := b.SB.Destroy(pctx); err != nil {
		t.Fatalf("Destroy of a paused sandbox: %v", err)
	}
	t.Logf("Destroy of a paused sandbox took %v", time.Since(start))
	<-loop
}
