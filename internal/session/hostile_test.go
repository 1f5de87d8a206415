package session

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
)

// An agent asking for huge limits is held to what the host can promise:
// the committed memory, CPUs and pids of all sandboxes stay within the
// capacity, at create and when limits are widened.
func TestHostileAdmissionKeepsCommitmentsWithinTheHost(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, Options{Capacity: Capacity{MemoryBytes: 1<<30 + 16<<20, CPUs: 3, Pids: 1000}})
	ctx := context.Background()
	half := CreateRequest{Spec: sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 512 << 20, CPUs: 1, Pids: 100, WorkspaceBytes: 64 << 20, TmpBytes: 64 << 20}}}
	a, err := m.Create(ctx, "agent", half)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, "agent", half); err != nil {
		t.Fatal(err)
	}
	_, err = m.Create(ctx, "agent", half)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "memory is committed") {
		t.Fatalf("a third 512MiB sandbox on a 1GiB capacity: %v", err)
	}
	big := CreateRequest{Spec: sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 8 << 20, CPUs: 2, WorkspaceBytes: 1 << 20, TmpBytes: 1 << 20}}}
	if _, err := m.Create(ctx, "agent", big); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "CPUs are committed") {
		t.Fatalf("2 more CPUs on a capacity of 3 with 2 committed: %v", err)
	}
	// Widening is held to the same capacity.
	if err := m.UpdateLimits(ctx, a.ID, sandbox.Limits{MemoryBytes: 768 << 20}); !errors.Is(err, ErrLimit) {
		t.Fatalf("widening past the capacity: %v", err)
	}
	if err := m.UpdateLimits(ctx, a.ID, sandbox.Limits{MemoryBytes: 256 << 20}); err != nil {
		t.Fatalf("narrowing: %v", err)
	}
	if l, _ := m.Limits(a.ID); l.MemoryBytes != 256<<20 {
		t.Fatalf("limits after narrowing: %+v", l)
	}
	// What an ended sandbox held is free again.
	if err := m.Destroy(ctx, "agent", a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, "agent", half); err != nil {
		t.Fatalf("after a destroy the capacity is free again: %v", err)
	}
	m.mu.Lock()
	got := m.committed
	m.mu.Unlock()
	if got.memory != 1<<30 || got.cpus != 2 || got.pids != 200 {
		t.Fatalf("committed %+v, want 1GiB, 2 CPUs, 200 pids", got)
	}
}

// One principal cannot take every slot: sandboxes and execs in flight
// count per principal, execs also per sandbox.
func TestHostileQuotasPerPrincipal(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, Options{Quotas: Quotas{SandboxesPerPrincipal: 2, ExecsPerPrincipal: 3, ExecsPerSandbox: 2}})
	ctx := context.Background()
	var ids []string
	for range 2 {
		in := create(t, m, "agent:a", CreateRequest{})
		ids = append(ids, in.ID)
	}
	if _, err := m.Create(ctx, "agent:a", CreateRequest{}); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "agent:a") {
		t.Fatalf("a third sandbox for agent:a: %v", err)
	}
	b, err := m.Create(ctx, "agent:b", CreateRequest{})
	if err != nil {
		t.Fatalf("agent:b is not held to agent:a's quota: %v", err)
	}

	// Two execs hold sandbox 0; a third there is refused, one in sandbox 1
	// reaches agent:a's total of 3, and one more anywhere of agent:a's is
	// refused while agent:b's still runs.
	release := make(chan struct{})
	var wg sync.WaitGroup
	started := make(chan struct{}, 3)
	hold := func(id string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started <- struct{}{}
			_, _ = m.Exec(ctx, "agent:a", id, sandbox.ExecRequest{Argv: []string{"sh", "-c", "read x"}, Stdin: blockUntil(release)})
		}()
	}
	hold(ids[0])
	hold(ids[0])
	hold(ids[1])
	for range 3 {
		<-started
	}
	waitBusy(t, m, 3)
	if _, err := m.Exec(ctx, "agent:a", ids[0], sandbox.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "sandbox") {
		t.Fatalf("a third exec in one sandbox: %v", err)
	}
	if _, err := m.Exec(ctx, "agent:a", ids[1], sandbox.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "agent:a") {
		t.Fatalf("a fourth exec of agent:a: %v", err)
	}
	if res, err := m.Exec(ctx, "agent:b", b.ID, sandbox.ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("agent:b's exec while agent:a is at its quota: %v %+v", err, res)
	}
	close(release)
	wg.Wait()
	if res, err := m.Exec(ctx, "agent:a", ids[0], sandbox.ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("after the execs ended: %v %+v", err, res)
	}
}

// A sandbox whose pid 1 dies under it is marked crashed, audited, and
// frees its slot, instead of showing as running while every exec fails.
func TestHostileCrashedSandboxFreesItsSlot(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	var ends []string
	m := f.manager(t, Options{MaxSandboxes: 1, OnEnd: func(id, state, reason string) {
		mu.Lock()
		ends = append(ends, state)
		mu.Unlock()
	}})
	ctx := context.Background()
	in := create(t, m, "agent", CreateRequest{})
	m.mu.Lock()
	nb := m.live[in.ID].sb.(*native.Sandbox)
	m.mu.Unlock()
	if err := syscall.Kill(nb.InitPid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := m.Get(ctx, in.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == StateCrashed {
			if !strings.Contains(got.EndReason, "pid 1 died") {
				t.Fatalf("end reason %q", got.EndReason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("state %q 20s after its pid 1 was killed", got.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := m.Create(ctx, "agent", CreateRequest{}); err != nil {
		t.Fatalf("the crashed sandbox still holds its slot: %v", err)
	}
	if k := f.kinds(t, in.ID); k[len(k)-1] != KindSandboxCrash {
		t.Fatalf("audit kinds %v", k)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ends) != 1 || ends[0] != StateCrashed {
		t.Fatalf("OnEnd calls %v", ends)
	}
	f.verify(t)
}

// No exec or upload happens whose audit record could not be written
// first.
func TestHostileNoActionWithoutItsAuditRecord(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, Options{})
	ctx := context.Background()
	in := create(t, m, "agent", CreateRequest{})
	// The log stops taking records (as on a full disk or a closed log).
	if err := f.log.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Exec(ctx, "agent", in.ID, sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo x > /workspace/ran"}}); err == nil ||
		!strings.Contains(err.Error(), "not run") {
		t.Fatalf("exec with no audit log: %v", err)
	}
	if err := m.WriteFile(ctx, "agent", in.ID, "/workspace/up", strings.NewReader("data"), 0o644); err == nil {
		t.Fatal("an upload with no audit log succeeded")
	}
	for _, p := range []string{"/workspace/ran", "/workspace/up"} {
		var buf bytes.Buffer
		if err := m.ReadFile(ctx, in.ID, p, &buf); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("%s exists after its action was refused: %v %q", p, err, buf.String())
		}
	}
}

// A teardown that fails is retried, and the sandbox's row never shows it
// running once it has been destroyed.
func TestHostileFailedTeardownIsRetried(t *testing.T) {
	f := newFixture(t)
	rt := &flakyRuntime{Runtime: f.rt, fails: 1}
	m, err := New(context.Background(), rt, f.db, f.log, Options{ReapEvery: 20 * time.Millisecond, Capacity: Capacity{MemoryBytes: 1 << 40}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	ctx := context.Background()
	in := create(t, m, "agent", CreateRequest{})
	if err := m.Destroy(ctx, "agent", in.ID); err == nil {
		t.Fatal("the first destroy was meant to fail")
	}
	if got, _ := m.Get(ctx, in.ID); got.State != StateDestroyed {
		t.Fatalf("after a failed teardown the sandbox shows %q", got.State)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		n, mem := len(m.tearingDown), m.committed.memory
		m.mu.Unlock()
		if n == 0 && mem == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("teardown not retried: %d pending, %d bytes committed", n, mem)
		}
		time.Sleep(20 * time.Millisecond)
	}
	recs, _ := f.log.Tail(ctx, 0, 1000)
	for _, r := range recs {
		if r.Session == in.ID && r.Kind == audit.KindSandboxDestroy && !strings.Contains(string(r.Data), "teardown failed") {
			t.Fatalf("the destroy record hides the teardown's failure: %s", r.Data)
		}
	}
}

// flakyRuntime makes the first Destroys of its sandboxes fail.
type flakyRuntime struct {
	sandbox.Runtime
	mu    sync.Mutex
	fails int
}

func (r *flakyRuntime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := r.Runtime.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &flakySandbox{Sandbox: sb, rt: r}, nil
}

type flakySandbox struct {
	sandbox.Sandbox
	rt *flakyRuntime
}

func (s *flakySandbox) Destroy(ctx context.Context) error {
	s.rt.mu.Lock()
	fail := s.rt.fails > 0
	s.rt.fails--
	s.rt.mu.Unlock()
	if fail {
		return errors.New("teardown failed (test)")
	}
	return s.Sandbox.Destroy(ctx)
}

// blockUntil is a reader that returns EOF once ch is closed.
func blockUntil(ch chan struct{}) *chanReader { return &chanReader{ch} }

type chanReader struct{ ch chan struct{} }

func (r *chanReader) Read([]byte) (int, error) {
	<-r.ch
	return 0, io.EOF
}

func waitBusy(t *testing.T, m *Manager, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		busy := 0
		for _, e := range m.live {
			busy += e.busy
		}
		m.mu.Unlock()
		if busy >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d operations in flight, want %d", busy, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
