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
)

// preparingRuntime's sandboxes check, when a prepared exec is run, that
// its intent record is already in the log.
type preparingRuntime struct {
	sandbox.Runtime // not *native.Runtime: its CreateNamed would make unwrapped sandboxes
	f               *fixture
	t               *testing.T
	prepared        int
	runs            int
	mu              sync.Mutex
}

func (r *preparingRuntime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := r.Runtime.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &preparingSandbox{Sandbox: sb, rt: r}, nil
}

type preparingSandbox struct {
	sandbox.Sandbox
	rt *preparingRuntime
}

func (s *preparingSandbox) PrepareExec(req sandbox.ExecRequest) (sandbox.PreparedExec, error) {
	p, err := s.Sandbox.(execPreparer).PrepareExec(req)
	if err != nil {
		return nil, err
	}
	s.rt.mu.Lock()
	s.rt.prepared++
	s.rt.mu.Unlock()
	return &checkedRun{PreparedExec: p, sb: s}, nil
}

type checkedRun struct {
	sandbox.PreparedExec
	sb *preparingSandbox
}

func (c *checkedRun) Run(ctx context.Context) (sandbox.ExecResult, error) {
	r := c.sb.rt
	r.mu.Lock()
	r.runs++
	runs := r.runs
	r.mu.Unlock()
	intents := 0
	for _, k := range r.f.kinds(r.t, c.sb.ID()) {
		if strings.HasSuffix(k, audit.IntentSuffix) {
			intents++
		}
	}
	if intents < runs {
		r.t.Errorf("a prepared exec in %s ran before its intent was in the log (%d intents, %d runs)", c.sb.ID(), intents, runs)
	}
	return c.PreparedExec.Run(ctx)
}

// An exec is readied while its intent commits and started only once the
// intent is durable; one whose intent cannot be written is readied and
// dropped without running.
func TestExecPreparedWhileItsIntentCommits(t *testing.T) {
	f := newFixture(t)
	rt := &preparingRuntime{Runtime: f.rt, f: f, t: t}
	m, err := New(context.Background(), rt, f.db, f.log, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	ctx := context.Background()
	in := create(t, m, "agent", CreateRequest{})
	var out strings.Builder
	res, err := m.Exec(ctx, "agent", in.ID, sandbox.ExecRequest{Argv: []string{"echo", "hi"}, Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "hi\n" {
		t.Fatalf("exec: %+v %v %q", res, err, out.String())
	}
	// A background process too.
	p, err := m.Spawn(ctx, "agent", in.ID, SpawnRequest{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := m.WaitProcess(ctx, in.ID, p.PID); err != nil || got.Exit == nil || *got.Exit != 0 {
		t.Fatalf("the process: %+v %v", got, err)
	}
	if rt.prepared != 2 || rt.runs != 2 {
		t.Fatalf("%d execs were prepared and %d run, want 2", rt.prepared, rt.runs)
	}
	// A bad request is refused by the preparation, after its intent: the
	// log says it was asked for and failed.
	if _, err := m.Exec(ctx, "agent", in.ID, sandbox.ExecRequest{Argv: []string{"true"}, Cwd: "relative"}); err == nil {
		t.Fatal("an exec with a relative cwd ran")
	}
	if err := f.log.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Exec(ctx, "agent", in.ID, sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo x > /workspace/ran"}}); err == nil ||
		!strings.Contains(err.Error(), "not run") {
		t.Fatalf("exec with no audit log: %v", err)
	}
	if _, err := m.Spawn(ctx, "agent", in.ID, SpawnRequest{Argv: []string{"sh", "-c", "echo x > /workspace/ran"}}); err == nil ||
		!strings.Contains(err.Error(), "not started") {
		t.Fatalf("spawn with no audit log: %v", err)
	}
	time.Sleep(50 * time.Millisecond) // what a started process would have had to write
	var buf strings.Builder
	if err := m.ReadFile(ctx, in.ID, "/workspace/ran", &buf); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("the refused command ran: %v %q", err, buf.String())
	}
}
