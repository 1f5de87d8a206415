package native_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

// A paused sandbox's busy loop gets no CPU; its processes and files are
// there when it resumes, and the loop runs again.
func TestPause(t *testing.T) {
	b := sandboxtest.New(t, sandboxtest.Native(t), sandbox.Spec{})
	sb := b.SB.(*native.Sandbox)
	b.Sh("echo kept > /tmp/keep")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loop := make(chan sandboxtest.Output, 1)
	go func() {
		loop <- b.ExecCtx(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo $$ > /tmp/loop.pid; while :; do :; done"}})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for b.Sh("cat /tmp/loop.pid 2>/dev/null").Stdout == "" {
		if time.Now().After(deadline) {
			t.Fatal("the loop did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer pcancel()
	start := time.Now()
	if err := sb.Pause(pctx); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	t.Logf("Pause took %v", time.Since(start))
	if err := sb.Pause(pctx); err != nil {
		t.Fatalf("Pause of a paused sandbox: %v", err)
	}
	before, err := sb.Stats(pctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	after, err := sb.Stats(pctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := after.CPUUsage - before.CPUUsage; d > 5*time.Millisecond {
		t.Errorf("a paused sandbox used %v of CPU in 500ms", d)
	}
	if after.MemoryBytes == 0 || after.Pids < 2 {
		t.Errorf("paused sandbox stats %+v: want its memory and processes kept", after)
	}
	start = time.Now()
	if err := sb.Resume(pctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	t.Logf("Resume took %v", time.Since(start))
	o := b.Sh(`cat /tmp/keep; kill -0 "$(cat /tmp/loop.pid)" && echo alive`)
	if got := strings.Fields(o.Stdout); len(got) != 2 || got[0] != "kept" || got[1] != "alive" {
		t.Errorf("after Resume: %q, want the file and the loop", o.Stdout)
	}
	time.Sleep(300 * time.Millisecond)
	thawed, err := sb.Stats(pctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := thawed.CPUUsage - after.CPUUsage; d < 50*time.Millisecond {
		t.Errorf("the resumed loop used only %v of CPU in 300ms", d)
	}
	if err := sb.Resume(pctx); err != nil {
		t.Errorf("Resume of a running sandbox: %v", err)
	}
	// Destroyed while paused: nothing is left hanging.
	if err := sb.Pause(pctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer dcancel()
	start = time.Now()
	if err := sb.Destroy(dctx); err != nil {
		t.Fatalf("Destroy of a paused sandbox: %v", err)
	}
	t.Logf("Destroy of a paused sandbox took %v", time.Since(start))
	<-loop
}
