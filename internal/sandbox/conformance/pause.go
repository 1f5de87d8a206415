package conformance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// pauser is what a backend's Sandbox offers for Pause and Resume (the
// session's sandbox pauser).
type pauser interface {
	Pause(context.Context) error
	Resume(context.Context) error
}

// pause checks Pause and Resume: a paused busy loop gets (almost) no CPU,
// and its memory and processes are kept; a process and a /tmp file are
// there after Resume, and the loop runs again; both are idempotent; a
// paused sandbox is destroyed cleanly.
func (s *suite) pause(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	sb, ok := b.SB.(pauser)
	if !ok {
		t.Fatalf("%T has no Pause and Resume", b.SB)
	}
	b.Sh("echo kept > /tmp/keep")
	loop := startBG(t, b, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "while :; do :; done"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := sb.Pause(ctx); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	t.Logf("Pause took %v", time.Since(start))
	if err := sb.Pause(ctx); err != nil {
		t.Errorf("Pause of a paused sandbox: %v", err)
	}
	before, err := b.SB.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	after, err := b.SB.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CPU used while paused for 500ms: %v", after.CPUUsage-before.CPUUsage)
	if d := after.CPUUsage - before.CPUUsage; d > 25*time.Millisecond {
		t.Errorf("a paused sandbox used %v of CPU in 500ms", d)
	}
	if after.MemoryBytes == 0 || after.Pids < 2 {
		t.Errorf("paused sandbox stats %+v: want its memory and processes kept", after)
	}
	start = time.Now()
	if err := sb.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	t.Logf("Resume took %v", time.Since(start))
	if err := sb.Resume(ctx); err != nil {
		t.Errorf("Resume of a running sandbox: %v", err)
	}
	o := b.Sh(fmt.Sprintf(`cat /tmp/keep; kill -0 %d && echo alive`, loop.pid))
	if got := strings.Fields(o.Stdout); len(got) != 2 || got[0] != "kept" || got[1] != "alive" {
		t.Errorf("after Resume: %q, want the file and the loop", o.Stdout)
	}
	time.Sleep(300 * time.Millisecond)
	thawed, err := b.SB.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := thawed.CPUUsage - after.CPUUsage; d < 50*time.Millisecond {
		t.Errorf("the resumed loop used only %v of CPU in 300ms", d)
	}
	// Destroyed while paused: nothing is left hanging.
	if err := sb.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer dcancel()
	start = time.Now()
	if err := b.SB.Destroy(dctx); err != nil {
		t.Fatalf("Destroy of a paused sandbox: %v", err)
	}
	t.Logf("Destroy of a paused sandbox took %v", time.Since(start))
	loop.wait(t, 30*time.Second)
}
