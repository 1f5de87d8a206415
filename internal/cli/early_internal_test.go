package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/backend"
)

// fakeRuntime counts its Close calls.
type fakeRuntime struct{ closed atomic.Int32 }

func (f *fakeRuntime) Name() string { return "fake" }
func (f *fakeRuntime) Create(context.Context, sandbox.Spec) (sandbox.Sandbox, error) {
	return nil, errors.New("fake runtime: no sandboxes")
}
func (f *fakeRuntime) Close(context.Context) error { f.closed.Add(1); return nil }

// collect is a logf that keeps its lines.
func collect(lines *[]string) func(string, ...any) {
	return func(format string, args ...any) { *lines = append(*lines, fmt.Sprintf(format, args...)) }
}

// The lines an early runtime logs before its claim reach the claimer's
// logf first, in order and bounded; the later ones go straight there.
func TestEarlyRuntimeReplaysWhatItLoggedOnClaim(t *testing.T) {
	rt := &fakeRuntime{}
	var sink func(string, ...any)
	er := openEarly(func(logf func(string, ...any)) (sandbox.Runtime, error) {
		for i := range maxHeld + 10 {
			logf("line %d", i)
		}
		sink = logf
		return rt, nil
	})
	var got []string
	if claimed := er.claim(collect(&got)); claimed != rt {
		t.Fatalf("claim = %v, want the runtime opened", claimed)
	}
	want := make([]string, maxHeld)
	for i := range want {
		want[i] = fmt.Sprintf("line %d", i)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("replayed %d lines %q..., want the first %d in order", len(got), got[:min(len(got), 3)], maxHeld)
	}
	sink("after the claim")
	if last := got[len(got)-1]; last != "after the claim" {
		t.Fatalf("a line logged after the claim went to %q, not the claimer", last)
	}
	if rt.closed.Load() != 0 {
		t.Fatal("a claimed runtime was closed")
	}
}

// An opening that failed is not handed out: the run opens a runtime
// itself and reports that error.
func TestEarlyRuntimeFailedOpeningIsNotClaimed(t *testing.T) {
	er := openEarly(func(logf func(string, ...any)) (sandbox.Runtime, error) {
		logf("checking the host")
		return nil, fmt.Errorf("%w: no user namespaces", sandbox.ErrUnsupported)
	})
	var got []string
	if rt := er.claim(collect(&got)); rt != nil {
		t.Fatalf("claim = %v after a failed opening, want nil", rt)
	}
	if len(got) != 0 {
		t.Fatalf("a failed opening's lines were replayed: %q (the run's own opening logs them again)", got)
	}
}

// A run that asks for another backend, or ends before its claim, closes
// the early runtime, once.
func TestEarlyRuntimeUnclaimedIsClosed(t *testing.T) {
	rt := &fakeRuntime{}
	e := &env{early: openEarly(func(func(string, ...any)) (sandbox.Runtime, error) { return rt, nil })}
	e.discardEarly()
	e.discardEarly()
	if n := rt.closed.Load(); n != 1 {
		t.Fatalf("closed %d times, want once", n)
	}

	rt2 := &fakeRuntime{}
	e.early = openEarly(func(func(string, ...any)) (sandbox.Runtime, error) { return rt2, nil })
	if _, err := e.openRuntime(context.Background(), "no-such-backend", func(string, ...any) {}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Fatalf("openRuntime(no-such-backend) = %v, want the backend's own refusal", err)
	}
	if n := rt2.closed.Load(); n != 1 || e.early != nil {
		t.Fatalf("the early runtime was closed %d times and is kept %v, want closed once and dropped", n, e.early != nil)
	}

	rt3 := &fakeRuntime{}
	e.early = openEarly(func(func(string, ...any)) (sandbox.Runtime, error) { return rt3, nil })
	got, err := e.openRuntime(context.Background(), backend.Native, func(string, ...any) {})
	if err != nil || got != rt3 || rt3.closed.Load() != 0 || e.early != nil {
		t.Fatalf("openRuntime(native) = %v, %v (closed %d); want the early runtime, claimed", got, err, rt3.closed.Load())
	}
}
