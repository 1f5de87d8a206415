package session

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
)

// namedTestRuntime is a naming runtime (namingRuntime) whose build is
// the test's: build gets the real runtime and the session's named.
type namedTestRuntime struct {
	*native.Runtime
	build func(ctx context.Context, rt *native.Runtime, spec sandbox.Spec, named func(string)) (sandbox.Sandbox, error)

	mu   sync.Mutex
	made []sandbox.Sandbox
}

// failsAfterNaming is a runtime whose build names its sandbox id and then
// fails, as a build that started over or broke after naming does.
func failsAfterNaming(f *fixture, id string) *namedTestRuntime {
	return &namedTestRuntime{Runtime: f.rt, build: func(ctx context.Context, _ *native.Runtime, _ sandbox.Spec, named func(string)) (sandbox.Sandbox, error) {
		named(id)
		return nil, errors.New("the build failed (test)")
	}}
}

func (r *namedTestRuntime) CreateNamed(ctx context.Context, spec sandbox.Spec, named func(string)) (sandbox.Sandbox, error) {
	sb, err := r.build(ctx, r.Runtime, spec, named)
	if sb != nil {
		r.mu.Lock()
		r.made = append(r.made, sb)
		r.mu.Unlock()
	}
	return sb, err
}

func (f *fixture) namedManager(t *testing.T, rt *namedTestRuntime) *Manager {
	t.Helper()
	m, err := New(context.Background(), rt, f.db, f.log, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// hasRecord reports whether the log holds a record of kind for id.
func (f *fixture) hasRecord(t *testing.T, id, kind string) bool {
	t.Helper()
	for _, k := range f.kinds(t, id) {
		if k == kind {
			return true
		}
	}
	return false
}

// A runtime that names its sandbox before building it gets the
// sandbox's record committed while it builds: the build here waits for
// the record to be in the log, which it would never be if the commit
// came after the build.
func TestCreateRecordCommitsWhileTheSandboxIsBuilt(t *testing.T) {
	f := newFixture(t)
	var heard []string
	rt := &namedTestRuntime{Runtime: f.rt, build: func(ctx context.Context, real *native.Runtime, spec sandbox.Spec, named func(string)) (sandbox.Sandbox, error) {
		return real.CreateNamed(ctx, spec, func(id string) {
			heard = append(heard, id)
			named(id)
			for deadline := time.Now().Add(10 * time.Second); !f.hasRecord(t, id, audit.KindSandboxCreate); {
				if time.Now().After(deadline) {
					t.Errorf("no sandbox.create record for %s while it was built", id)
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}}
	m := f.namedManager(t, rt)
	ctx := context.Background()
	in := create(t, m, "agent", CreateRequest{Labels: map[string]string{"team": "a"}})
	if len(heard) != 1 || heard[0] != in.ID {
		t.Fatalf("the runtime named %v, the create returned %s", heard, in.ID)
	}
	if got := f.kinds(t, in.ID); len(got) != 1 || got[0] != audit.KindSandboxCreate {
		t.Fatalf("records %v, want one sandbox.create", got)
	}
	if got, err := m.Get(ctx, in.ID); err != nil || got.State != StateRunning || got.Labels["team"] != "a" {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if _, err := m.Exec(ctx, "agent", in.ID, sandbox.ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Destroy(ctx, "agent", in.ID); err != nil {
		t.Fatal(err)
	}
	f.verify(t)
}

// A build that fails after naming its sandbox leaves the log saying so
// (the create, then its end) and no running row, slot or commitment.
func TestCreateRecordOfAFailedBuildIsEnded(t *testing.T) {
	f := newFixture(t)
	const ghost = "sbx-00000000000000aa"
	rt := failsAfterNaming(f, ghost)
	m := f.namedManager(t, rt)
	ctx := context.Background()
	if _, err := m.Create(ctx, "agent", CreateRequest{}); err == nil || !strings.Contains(err.Error(), "the build failed (test)") {
		t.Fatalf("Create = %v, want the build's error", err)
	}
	if got := f.kinds(t, ghost); len(got) != 2 || got[0] != audit.KindSandboxCreate || got[1] != audit.KindSandboxDestroy {
		t.Fatalf("records of the failed create %v, want sandbox.create then sandbox.destroy", got)
	}
	recs, err := f.log.Tail(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	end := recs[len(recs)-1]
	if end.Session != ghost || end.Actor != "daemon" || !strings.Contains(string(end.Data), "its create failed") ||
		!strings.Contains(string(end.Data), "the build failed (test)") {
		t.Fatalf("the end of the failed create: %+v %s", end, end.Data)
	}
	if got, err := m.Get(ctx, ghost); err != nil || got.State != StateDestroyed {
		t.Fatalf("the failed create's row: %+v, %v", got, err)
	}
	if list, _, err := m.List(ctx, ListPage{}); err != nil || len(list) != 0 {
		t.Fatalf("running after a failed create: %+v %v", list, err)
	}
	m.mu.Lock()
	starting, committed := m.starting, m.committed
	m.mu.Unlock()
	if starting != 0 || committed != (commitment{}) || m.Running() != 0 {
		t.Fatalf("a failed create holds starting %d, committed %+v, running %d", starting, committed, m.Running())
	}
	f.verify(t)
}

// A runtime that names one id and returns a sandbox of another (it
// started over) gets the first record ended and the sandbox recorded
// under its own id.
func TestCreateRecordFollowsTheSandboxsOwnID(t *testing.T) {
	f := newFixture(t)
	const ghost = "sbx-00000000000000bb"
	rt := &namedTestRuntime{Runtime: f.rt, build: func(ctx context.Context, real *native.Runtime, spec sandbox.Spec, named func(string)) (sandbox.Sandbox, error) {
		named(ghost)
		return real.Create(ctx, spec)
	}}
	m := f.namedManager(t, rt)
	ctx := context.Background()
	in := create(t, m, "agent", CreateRequest{})
	if in.ID == ghost {
		t.Fatal("the create returned the id the runtime did not build")
	}
	if got := f.kinds(t, ghost); len(got) != 2 || got[1] != audit.KindSandboxDestroy {
		t.Fatalf("records of the abandoned id %v, want sandbox.create then sandbox.destroy", got)
	}
	if got := f.kinds(t, in.ID); len(got) != 1 || got[0] != audit.KindSandboxCreate {
		t.Fatalf("records of the sandbox %v, want one sandbox.create", got)
	}
	if got, _ := m.Get(ctx, ghost); got.State != StateDestroyed {
		t.Fatalf("the abandoned id's row is %q", got.State)
	}
	if list, _, _ := m.List(ctx, ListPage{}); len(list) != 1 || list[0].ID != in.ID {
		t.Fatalf("running: %+v, want only %s", list, in.ID)
	}
	f.verify(t)
}

// A record that cannot be written while the sandbox is built undoes the
// create: the sandbox is destroyed and the caller told why.
func TestCreateRecordFailureDestroysTheSandbox(t *testing.T) {
	f := newFixture(t)
	rt := &namedTestRuntime{Runtime: f.rt, build: func(ctx context.Context, real *native.Runtime, spec sandbox.Spec, named func(string)) (sandbox.Sandbox, error) {
		return real.CreateNamed(ctx, spec, named)
	}}
	m := f.namedManager(t, rt)
	if err := f.log.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(context.Background(), "agent", CreateRequest{}); err == nil || !strings.Contains(err.Error(), "audit") {
		t.Fatalf("Create with no audit log = %v", err)
	}
	rt.mu.Lock()
	made := rt.made
	rt.mu.Unlock()
	if len(made) != 1 {
		t.Fatalf("the runtime made %d sandboxes, want 1", len(made))
	}
	select {
	case <-made[0].Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the sandbox of a create whose record failed still runs")
	}
	if m.Running() != 0 {
		t.Fatalf("%d running after the create failed", m.Running())
	}
}
