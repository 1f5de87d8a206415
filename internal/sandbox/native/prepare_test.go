package native_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

// A prepared exec runs nothing until Run, and an aborted one nothing at
// all, leaving no descriptor behind; each runs at most once.
func TestPrepareExecStartsOnlyOnRun(t *testing.T) {
	sandboxtest.Native(t)
	ctx := context.Background()
	r := sandboxtest.NewNative(t, native.Options{})
	s, err := r.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy(ctx)
	sb := s.(*native.Sandbox)
	touch := sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo ran >> /workspace/ran; echo out"}}
	ran := func() string {
		var out bytes.Buffer
		if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", "cat /workspace/ran 2>/dev/null; true"}, Stdout: &out}); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	before := openFDs(t)
	for i := 0; i < 20; i++ {
		p, err := sb.PrepareExec(touch)
		if err != nil {
			t.Fatal(err)
		}
		p.Abort()
		p.Abort()
		if _, err := p.Run(ctx); err == nil {
			t.Fatal("an aborted exec ran")
		}
	}
	if got := ran(); got != "" {
		t.Fatalf("aborted execs ran: %q", got)
	}
	if after := openFDs(t); after > before {
		t.Fatalf("20 aborted execs left %d descriptors", after-before)
	}
	var out bytes.Buffer
	req := touch
	req.Stdout = &out
	p, err := sb.PrepareExec(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := ran(); got != "" {
		t.Fatalf("a prepared exec ran before Run: %q", got)
	}
	if res, err := p.Run(ctx); err != nil || res.ExitCode != 0 || out.String() != "out\n" {
		t.Fatalf("Run: %+v %v %q", res, err, out.String())
	}
	if _, err := p.Run(ctx); err == nil {
		t.Fatal("a prepared exec ran twice")
	}
	p.Abort() // after Run: nothing
	if got := ran(); got != "ran\n" {
		t.Fatalf("after one Run the file holds %q", got)
	}
	if after := openFDs(t); after > before {
		t.Fatalf("prepared execs left %d descriptors", after-before)
	}
	// A request the sandbox refuses is refused at preparation.
	if _, err := sb.PrepareExec(sandbox.ExecRequest{}); err == nil {
		t.Fatal("an exec without argv was prepared")
	}
}
