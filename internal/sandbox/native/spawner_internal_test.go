package native

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/cgroups"
)

// A forked init is handed over before the spawner thread is back in its
// own cgroup, and the thread's return is reported apart (settle).

func trueBinary(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("true")
	if err != nil {
		t.Fatalf("no true binary: %v", err)
	}
	return path
}

func spawnReqFor(t *testing.T, forkInside func(func() error) error) spawnReq {
	exe := trueBinary(t)
	return spawnReq{exe: exe, argv: []string{exe}, attr: &syscall.ProcAttr{}, forkInside: forkInside,
		born: make(chan *initProc, 1), res: make(chan spawnRes, 1)}
}

// waitWithin calls w, failing the test if it does not return within d.
func waitWithin(t *testing.T, w spawnWait, d time.Duration) (*initProc, func() error, error) {
	t.Helper()
	type out struct {
		p      *initProc
		settle func() error
		err    error
	}
	ch := make(chan out, 1)
	go func() {
		p, settle, err := w()
		ch <- out{p, settle, err}
	}()
	select {
	case o := <-ch:
		return o.p, o.settle, o.err
	case <-time.After(d):
		t.Fatalf("the spawn's wait did not return within %v", d)
		return nil, nil, nil
	}
}

// startWith hands s a start of true whose step into a cgroup is
// forkInside, and waits for what the start hands back.
func startWith(t *testing.T, s *spawner, forkInside func(fork func() error) error) (*initProc, func() error, error) {
	t.Helper()
	w, err := s.send(context.Background(), spawnReqFor(t, forkInside))
	if err != nil {
		t.Fatal(err)
	}
	return waitWithin(t, w, 10*time.Second)
}

func TestSpawnerHandsTheInitOverBeforeItsThreadIsHome(t *testing.T) {
	s := newSpawner(t.Logf)
	home := make(chan struct{})
	p, settle, err := startWith(t, s, func(fork func() error) error {
		if err := fork(); err != nil {
			return err
		}
		<-home // the thread is still "inside" until the test lets it go
		return nil
	})
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	defer p.wait()
	settled := make(chan error, 1)
	go func() { settled <- settle() }()
	select {
	case err := <-settled:
		t.Fatalf("settle returned (%v) before the thread left the cgroup", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(home)
	if err := <-settled; err != nil {
		t.Fatalf("settle: %v", err)
	}
}

func TestSpawnerStrandedThreadIsReportedAndReplaced(t *testing.T) {
	s := newSpawner(t.Logf)
	p, settle, err := startWith(t, s, func(fork func() error) error {
		if err := fork(); err != nil {
			return err
		}
		return fmt.Errorf("leaving the cgroup: %w", cgroups.ErrStranded)
	})
	if err != nil {
		t.Fatalf("wait: %v (the fork succeeded)", err)
	}
	defer p.wait()
	if err := settle(); !errors.Is(err, cgroups.ErrStranded) {
		t.Fatalf("settle = %v, want ErrStranded", err)
	}
	// A fresh thread serves the next start.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	exe := trueBinary(t)
	p2, err := s.start(ctx, exe, []string{exe}, &syscall.ProcAttr{}, nil)
	if err != nil {
		t.Fatalf("the next start: %v", err)
	}
	if err := p2.wait(); err != nil {
		t.Fatalf("reaping the next start: %v", err)
	}
}

func TestSpawnerRefusalBeforeTheForkHandsOverNothing(t *testing.T) {
	s := newSpawner(t.Logf)
	p, settle, err := startWith(t, s, func(func() error) error {
		return fmt.Errorf("fork inside: %w", cgroups.ErrNotSupported)
	})
	if !errors.Is(err, cgroups.ErrNotSupported) || p != nil || settle != nil {
		t.Fatalf("wait = %v, %v, %v; want no process and ErrNotSupported", p, settle != nil, err)
	}
}
