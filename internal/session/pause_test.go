package session

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// With idle_action pause an idle sandbox pauses instead of ending, the
// next request resumes it with its files, and its TTL still ends it.
func TestIdlePauseResumesOnNextRequest(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, Options{ReapEvery: 20 * time.Millisecond, IdleAction: IdlePause})
	ctx := context.Background()
	in := create(t, m, "agent", CreateRequest{Idle: 200 * time.Millisecond, TTL: 3 * time.Second})
	if err := m.WriteFile(ctx, "agent", in.ID, "/workspace/a", strings.NewReader("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitState(t, m, in.ID, StatePaused, 2*time.Second)
	if l, _, err := m.List(ctx, ListPage{}); err != nil || len(l) != 1 || l[0].State != StatePaused {
		t.Fatalf("List while paused = %+v, %v", l, err)
	}
	// The row follows once the freeze is done.
	for deadline := time.Now().Add(2 * time.Second); storedState(t, f, in.ID) != StatePaused; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stored state %q, want paused", storedState(t, f, in.ID))
		}
	}
	// Still counts: it holds its slot and commitment.
	if m.Running() != 1 {
		t.Errorf("Running() = %d with one paused sandbox", m.Running())
	}
	start := time.Now()
	var out strings.Builder
	res, err := m.Exec(ctx, "agent", in.ID, sandbox.ExecRequest{Argv: []string{"cat", "/workspace/a"}, Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "kept" {
		t.Fatalf("exec on a paused sandbox: %+v %v %q", res, err, out.String())
	}
	t.Logf("exec that resumed a paused sandbox took %v", time.Since(start))
	if got, _ := m.Get(ctx, in.ID); got.State != StateRunning {
		t.Errorf("state after the request %q, want running", got.State)
	}
	// Idle again, paused again; then the TTL ends it although paused.
	waitState(t, m, in.ID, StatePaused, 2*time.Second)
	waitState(t, m, in.ID, StateReaped, 5*time.Second)
	if got, _ := m.Get(ctx, in.ID); got.EndReason != "ttl" {
		t.Errorf("end reason %q, want ttl", got.EndReason)
	}
	k := f.kinds(t, in.ID)
	want := []string{KindSandboxPause + audit.IntentSuffix, KindSandboxPause, KindSandboxResume + audit.IntentSuffix, KindSandboxResume}
	for _, w := range want {
		if !slices.Contains(k, w) {
			t.Errorf("audit kinds %q lack %s", k, w)
		}
	}
	f.verify(t)
}

// A sandbox's own idle action overrides the policy's, both ways, and is
// reported; an unknown one is refused and creates nothing.
func TestIdleActionPerSandbox(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, Options{ReapEvery: 20 * time.Millisecond}) // the policy's: destroy
	pausing := create(t, m, "agent", CreateRequest{Idle: 150 * time.Millisecond, IdleAction: IdlePause})
	ending := create(t, m, "agent", CreateRequest{Idle: 150 * time.Millisecond})
	if pausing.IdleAction != IdlePause || ending.IdleAction != IdleDestroy {
		t.Fatalf("idle actions reported %q and %q", pausing.IdleAction, ending.IdleAction)
	}
	waitState(t, m, pausing.ID, StatePaused, 2*time.Second)
	waitState(t, m, ending.ID, StateReaped, 2*time.Second)

	m2 := f.manager(t, Options{ReapEvery: 20 * time.Millisecond, IdleAction: IdlePause})
	ends := create(t, m2, "agent", CreateRequest{Idle: 150 * time.Millisecond, IdleAction: IdleDestroy})
	waitState(t, m2, ends.ID, StateReaped, 2*time.Second)

	if _, err := m.Create(context.Background(), "agent", CreateRequest{IdleAction: "hibernate"}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Fatalf("idle action hibernate: %v, want ErrInvalidSpec", err)
	}
	if n := m.Running(); n != 1 {
		t.Fatalf("Running() = %d after a refused create, want 1 (the paused one)", n)
	}
}

// Explicit pause and resume; a busy sandbox is not paused; without
// idle_action pause an idle sandbox ends as before.
func TestPauseResume(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, Options{})
	ctx := context.Background()
	in := create(t, m, "agent", CreateRequest{})
	if err := m.Pause(ctx, "agent", in.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Pause(ctx, "agent", in.ID); err != nil {
		t.Fatalf("pause of a paused sandbox: %v", err)
	}
	if got, _ := m.Get(ctx, in.ID); got.State != StatePaused {
		t.Fatalf("state %q", got.State)
	}
	if err := m.Resume(ctx, "agent", in.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Resume(ctx, "agent", in.ID); err != nil {
		t.Fatalf("resume of a running sandbox: %v", err)
	}
	if got, _ := m.Get(ctx, in.ID); got.State != StateRunning || storedState(t, f, in.ID) != StateRunning {
		t.Fatalf("state %q after resume", got.State)
	}
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := m.Exec(ctx, "agent", in.ID, sandbox.ExecRequest{Argv: []string{"sh", "-c", "read x"}, Stdin: blockUntil(release)})
		done <- err
	}()
	waitBusy(t, m, 1)
	if err := m.Pause(ctx, "agent", in.ID); !errors.Is(err, ErrBusy) {
		t.Errorf("pause while an exec runs: %v, want ErrBusy", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Destroyed while paused.
	if err := m.Pause(ctx, "agent", in.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Destroy(ctx, "agent", in.ID); err != nil {
		t.Fatalf("destroy of a paused sandbox: %v", err)
	}
	if got, _ := m.Get(ctx, in.ID); got.State != StateDestroyed {
		t.Errorf("state %q after destroy", got.State)
	}
	if err := m.Pause(ctx, "agent", in.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("pause of an ended sandbox: %v", err)
	}
	// A paused sandbox keeps its slot in its principal's quota.
	q := f.manager(t, Options{Quotas: Quotas{SandboxesPerPrincipal: 1}})
	held := create(t, q, "agent:q", CreateRequest{})
	if err := q.Pause(ctx, "agent:q", held.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Create(ctx, "agent:q", CreateRequest{}); !errors.Is(err, ErrLimit) {
		t.Errorf("a second sandbox while the first is paused: %v, want ErrLimit", err)
	}
	if _, err := New(ctx, f.rt, f.db, f.log, Options{IdleAction: "hibernate"}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("idle action hibernate: %v", err)
	}
}

func waitState(t *testing.T, m *Manager, id, state string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, err := m.Get(context.Background(), id)
		if err == nil && got.State == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: state %q (%v), want %s within %v", id, got.State, err, state, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func storedState(t *testing.T, f *fixture, id string) string {
	t.Helper()
	var s string
	if err := f.db.ReadDB().QueryRow(`SELECT state FROM sandboxes WHERE id = ?`, id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// On a backend that cannot pause, Pause is unsupported and idle_action
// pause ends an idle sandbox as destroy would: never left running idle.
func TestHostileIdlePauseWithoutPauserDestroys(t *testing.T) {
	f := newFixture(t)
	m, err := New(context.Background(), &flakyRuntime{Runtime: f.rt}, f.db, f.log, Options{ReapEvery: 20 * time.Millisecond, IdleAction: IdlePause})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	in := create(t, m, "agent", CreateRequest{})
	if err := m.Pause(context.Background(), "agent", in.ID); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("Pause on a backend without it: %v", err)
	}
	idle := create(t, m, "agent", CreateRequest{Idle: 100 * time.Millisecond})
	waitState(t, m, idle.ID, StateReaped, 3*time.Second)
	if got, _ := m.Get(context.Background(), idle.ID); got.EndReason != "idle" {
		t.Errorf("end reason %q", got.EndReason)
	}
}
