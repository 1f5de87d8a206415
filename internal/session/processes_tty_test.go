package session

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ironclaw/ironclaw/internal/errdefs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// noTTYRuntime's sandboxes answer a terminal as the container backends do.
type noTTYRuntime struct{ sandbox.Runtime }

func (r noTTYRuntime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := r.Runtime.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return noTTYSandbox{sb}, nil
}

type noTTYSandbox struct{ sandbox.Sandbox }

func (s noTTYSandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if req.TTY {
		return sandbox.ExecResult{}, fmt.Errorf("%w: terminals (test)", sandbox.ErrUnsupported)
	}
	return s.Sandbox.Exec(ctx, req)
}

func TestSpawnTTYOnABackendWithoutTerminals(t *testing.T) {
	f := newFixture(t)
	m, err := New(context.Background(), noTTYRuntime{f.rt}, f.db, f.log, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	info := create(t, m, "agent", CreateRequest{})
	_, err = m.Spawn(context.Background(), "agent", info.ID, SpawnRequest{Argv: []string{"sh"}, TTY: true})
	if !errors.Is(err, errdefs.ErrUnsupported) {
		t.Fatalf("spawn with a terminal: %v", err)
	}
	if ps, _ := m.Processes(info.ID, ""); len(ps) != 0 {
		t.Errorf("a refused terminal left a process: %+v", ps)
	}
	if _, err := m.Spawn(context.Background(), "agent", info.ID, SpawnRequest{Argv: []string{"sh"}, TTY: true, Rows: 2000, Cols: 80}); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Errorf("a terminal of 2000 rows: %v", err)
	}
}

func TestTerminalAttachBounds(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, Options{Processes: ProcessLimits{Terminals: 1}})
	info := create(t, m, "agent", CreateRequest{})
	ctx := context.Background()
	a, err := m.Spawn(ctx, "agent", info.ID, SpawnRequest{Argv: []string{"sleep", "30"}, TTY: true})
	if err != nil || !a.TTY || !a.Stdin {
		t.Fatalf("spawn: %+v %v", a, err)
	}
	b, err := m.Spawn(ctx, "agent", info.ID, SpawnRequest{Argv: []string{"sleep", "30"}, TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := m.Spawn(ctx, "agent", info.ID, SpawnRequest{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.AttachTerminal(ctx, "agent", info.ID, plain.PID); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("attach without a terminal: %v", err)
	}
	term, err := m.AttachTerminal(ctx, "agent", info.ID, a.PID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.AttachTerminal(ctx, "agent", info.ID, a.PID); !errors.Is(err, ErrTerminalBusy) {
		t.Errorf("a second writer: %v", err)
	}
	if _, err := m.AttachTerminal(ctx, "agent", info.ID, b.PID); !errors.Is(err, ErrLimit) {
		t.Errorf("past the sandbox's terminals: %v", err)
	}
	if err := term.Resize(0, 80); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Errorf("resize to 0 rows: %v", err)
	}
	for range 10 { // never blocks: the newest size wins
		if err := term.Resize(30, 90); err != nil {
			t.Fatal(err)
		}
	}
	term.Close()
	term.Close()
	tb, err := m.AttachTerminal(ctx, "agent", info.ID, b.PID)
	if err != nil {
		t.Fatalf("after a detach: %v", err)
	}
	tb.Close()
}

func TestRawRingKeepsBytes(t *testing.T) {
	r := newRing(1 << 10)
	r.raw = true
	out := r.stream(streamStdout)
	out.Write([]byte{0xc3})
	out.Write([]byte{0xff, 'a'})
	frames, next, _, _ := r.read(0, 1<<20)
	if len(frames) != 1 || frames[0].Text != "\xc3\xffa" || next != 3 {
		t.Fatalf("frames %+v next %d", frames, next)
	}
	if frames, _, _, _ := r.read(1, 1<<20); len(frames) != 1 || frames[0].Text != "\xffa" {
		t.Errorf("from inside a sequence: %+v", frames)
	}
}
