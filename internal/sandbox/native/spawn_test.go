package native_test

import (
	"runtime/debug"
	"syscall"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

// TestCreateLeavesTheDaemonsPagesAlone: a create must not fork the
// daemon's address space (idmap.go). After a plain fork every page the
// parent then writes takes a fault, 17-20 µs each on the VMs we measure
// on; after a clone that shares the parent's memory until the init
// executes, none does. The test writes every page of a buffer it has
// already touched, once after a create, and counts its own minor faults.
func TestCreateLeavesTheDaemonsPagesAlone(t *testing.T) {
	r := sandboxtest.Native(t)
	const size = 32 << 20
	const pages = size / 4096
	buf := make([]byte, size)
	touch := func(v byte) {
		for i := 0; i < size; i += 4096 {
			buf[i] = v
		}
	}
	touch(1)
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // no collection's faults in the count
	b := sandboxtest.New(t, r, sandbox.Spec{})
	b.Run(nil, "true")
	before := minorFaults(t)
	touch(2)
	got := minorFaults(t) - before
	t.Logf("%d minor faults writing %d pages after a create", got, pages)
	if got > pages/4 {
		t.Fatalf("%d minor faults writing %d already-touched pages after a create: the create copied the daemon's address space", got, pages)
	}
}

func minorFaults(t *testing.T) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return ru.Minflt
}

// TestSandboxHoldsOneDescriptor: a sandbox costs the daemon one
// descriptor, its control socket (the init's standard error is that
// socket too, and pid 1 is held by its pid), idle and after commands have
// run. RLIMIT_NOFILE is what bounds the sandboxes one daemon holds: at one
// each, 10,000 fit under the usual hard limit of 20,000.
func TestSandboxHoldsOneDescriptor(t *testing.T) {
	r := sandboxtest.Native(t)
	sandboxtest.New(t, r, sandbox.Spec{}).Run(nil, "true") // what the runtime opens once
	before := openFDs(t)
	const n = 8
	for range n {
		b := sandboxtest.New(t, r, sandbox.Spec{})
		b.Run(nil, "true")
		b.Exec(sandbox.ExecRequest{Argv: []string{"true"}, TTY: true})
	}
	if got := openFDs(t) - before; got != n {
		t.Fatalf("%d sandboxes hold %d descriptors, want %d", n, got, n)
	}
}
