package session

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRingFramesOffsetsAndDrops(t *testing.T) {
	r := newRing(200)
	out, errw := r.stream(streamStdout), r.stream(streamStderr)
	out.Write([]byte("ab"))
	out.Write([]byte("c"))
	errw.Write([]byte("E"))
	// A rune split across writes is held back until it is whole.
	out.Write([]byte{0xc3})
	frames, next, _, ended := r.read(0, 1<<20)
	if len(frames) != 2 || frames[0].Text != "abc" || frames[1].Offset != 3 || !frames[1].IsStderr() || next != 4 || ended {
		t.Fatalf("frames %+v next %d", frames, next)
	}
	out.Write([]byte{0xa9})
	frames, next, _, _ = r.read(next, 1<<20)
	if len(frames) != 1 || frames[0].Text != "é" || next != 6 {
		t.Fatalf("after the rune: %+v %d", frames, next)
	}
	// An offset inside a rune starts at the next one; invalid bytes become U+FFFD.
	if frames, _, _, _ := r.read(5, 1<<20); len(frames) != 0 {
		t.Errorf("from inside a rune: %+v", frames)
	}
	out.Write([]byte{0xff, 'z'})
	frames, next, _, _ = r.read(6, 1<<20)
	if len(frames) != 1 || frames[0].Text != "\uFFFDz" || next != 10 {
		t.Errorf("invalid bytes: %+v %d", frames, next)
	}
	// Overflow: the oldest bytes go, and a reader behind is told how many.
	out.Write([]byte(strings.Repeat("x", 300)))
	end, start := r.bounds()
	if end != 310 || start <= 0 || r.size() > 200 {
		t.Fatalf("bounds %d %d size %d", end, start, r.size())
	}
	frames, next, _, _ = r.read(0, 1<<20)
	if frames[0].Dropped != start || frames[0].Offset != start || next != 310 {
		t.Errorf("behind the ring: %+v next %d", frames[0], next)
	}
	wake := make(chan struct{})
	go func() {
		_, _, w, _ := r.read(310, 1)
		<-w
		close(wake)
	}()
	time.Sleep(10 * time.Millisecond)
	r.finish()
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("finish did not wake a follower")
	}
	if _, _, _, ended := r.read(310, 1); !ended {
		t.Error("not ended after finish")
	}
}

func TestRingManyTinyFramesStayBounded(t *testing.T) {
	r := newRing(64 << 10)
	out, errw := r.stream(streamStdout), r.stream(streamStderr)
	for range 100000 {
		out.Write([]byte("a"))
		errw.Write([]byte("b"))
	}
	if r.size() > 64<<10 || len(r.chunks) > (64<<10)/frameOverhead {
		t.Errorf("size %d with %d chunks", r.size(), len(r.chunks))
	}
}

func TestProcessesSlowReaderAndSandboxEnd(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, Options{Processes: ProcessLimits{Ring: 8 << 10}})
	info := create(t, m, "agent", CreateRequest{})
	ctx := context.Background()

	// A reader that stops reading does not hold the process up.
	p, err := m.Spawn(ctx, "agent", info.ID, SpawnRequest{Argv: []string{"/bin/sh", "-c", "head -c 200000 /dev/zero"}})
	if err != nil {
		t.Fatal(err)
	}
	stuck := make(chan struct{})
	defer close(stuck)
	go m.ReadOutput(ctx, info.ID, p.PID, 0, true, nil, func(Frame) error { <-stuck; return nil })
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	done, err := m.WaitProcess(wctx, info.ID, p.PID)
	if err != nil || *done.Exit != 0 || done.Offset != 200000 || done.Dropped < 200000-8<<10 {
		t.Fatalf("with a stuck reader: %+v %v", done, err)
	}

	// A running process ends with its sandbox, and its table goes.
	p, err = m.Spawn(ctx, "agent", info.ID, SpawnRequest{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan ProcessInfo, 1)
	go func() {
		in, _ := m.WaitProcess(ctx, info.ID, p.PID)
		ended <- in
	}()
	time.Sleep(50 * time.Millisecond)
	if err := m.Destroy(ctx, "agent", info.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case in := <-ended:
		if in.State != ProcessExited {
			t.Errorf("after the sandbox's end: %+v", in)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the process outlived its sandbox")
	}
	if _, err := m.Processes(info.ID, ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("processes of an ended sandbox: %v", err)
	}
	for i := 0; ; i++ {
		m.procs.mu.Lock()
		n := len(m.procs.tables)
		m.procs.mu.Unlock()
		if n == 0 {
			break
		}
		if i == 500 {
			t.Fatal("the table of an ended sandbox is still held")
		}
		time.Sleep(10 * time.Millisecond)
	}
	kinds := strings.Join(f.kinds(t, info.ID), " ")
	if !strings.Contains(kinds, KindProcessSpawn+".intent "+KindProcessSpawn) && !strings.Contains(kinds, KindProcessSpawn+".intent") {
		t.Errorf("audit kinds %s", kinds)
	}
	f.verify(t)
}

func TestProcessesDaemonWideCap(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, Options{Processes: ProcessLimits{Total: 2}})
	a, b := create(t, m, "agent", CreateRequest{}), create(t, m, "agent", CreateRequest{})
	ctx := context.Background()
	sleep := SpawnRequest{Argv: []string{"sleep", "30"}}
	pa, err := m.Spawn(ctx, "agent", a.ID, sleep)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Spawn(ctx, "agent", b.ID, sleep); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Spawn(ctx, "agent", b.ID, sleep); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "daemon runs 2") {
		t.Fatalf("a third: %v", err)
	}
	if _, err := m.KillProcess(ctx, "agent", a.ID, pa.PID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Spawn(ctx, "agent", b.ID, sleep); err != nil {
		t.Fatalf("after a kill: %v", err)
	}
	if _, err := m.Spawn(ctx, "agent", a.ID, SpawnRequest{Argv: []string{"true"}, Tag: strings.Repeat("t", MaxTag+1)}); err == nil {
		t.Error("a long tag was taken")
	}
}
