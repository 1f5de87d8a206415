package cgroups

import (
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// cgroupOf returns /proc/<pid>/task/<tid>/cgroup parsed.
func cgroupOf(t *testing.T, path string) procCgroup {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := parseProcCgroup(data)
	if err != nil {
		t.Fatal(err)
	}
	return pc
}

// A process forked inside a v1 cgroup is born in it in every hierarchy,
// and the forking thread is back where it was afterwards.
func TestForkInsideReal(t *testing.T) {
	h := realHierarchy(t)
	c := create(t, h, "inside", Limits{Pids: 32, MemoryBytes: 64 << 20})
	if h.Version() != 1 {
		if err := c.ForkInside(func() error { t.Fatal("fork called on v2"); return nil }); !errors.Is(err, ErrNotSupported) {
			t.Fatalf("v2: ForkInside = %v, want ErrNotSupported", err)
		}
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := cgroupOf(t, "/proc/thread-self/cgroup")
	cmd := exec.Command("sleep", "30")
	if err := c.ForkInside(cmd.Start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	after := cgroupOf(t, "/proc/thread-self/cgroup")
	if !maps.Equal(before.v1, after.v1) {
		t.Fatalf("the forking thread did not go back: before %v, after %v", before.v1, after.v1)
	}
	child := cgroupOf(t, "/proc/"+strconv.Itoa(cmd.Process.Pid)+"/cgroup")
	for _, d := range h.dirs {
		for _, ctl := range d.controllers {
			if want := relOf(h, c, ctl); child.v1[ctl] != want {
				t.Errorf("child in %s at %q, want %q", ctl, child.v1[ctl], want)
			}
		}
	}
	pids, err := c.Pids()
	if err != nil || !slices.Contains(pids, cmd.Process.Pid) || slices.Contains(pids, os.Getpid()) {
		t.Fatalf("cgroup holds %v (%v); want the child %d and not us %d", pids, err, cmd.Process.Pid, os.Getpid())
	}
}

// A thread that is not where the hierarchy found the process is refused
// before anything moves or forks (the caller falls back to Add), and a
// fork that fails still brings the thread back.
func TestForkInsideRefusalsReal(t *testing.T) {
	h := realHierarchy(t)
	if h.Version() != 1 {
		t.Skip("ForkInside is cgroup v1 only")
	}
	c := create(t, h, "target", Limits{Pids: 32})
	elsewhere := create(t, h, "elsewhere", Limits{Pids: 32})
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	home := cgroupOf(t, "/proc/thread-self/cgroup")

	boom := errors.New("boom")
	if err := c.ForkInside(func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("ForkInside = %v, want fork's error", err)
	}
	if got := cgroupOf(t, "/proc/thread-self/cgroup"); !maps.Equal(home.v1, got.v1) {
		t.Fatalf("after a failed fork the thread is at %v, want %v", got.v1, home.v1)
	}

	pidsDir := elsewhere.dirFor("pids")
	if err := os.WriteFile(filepath.Join(pidsDir, "tasks"), []byte("0"), 0); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, d := range h.dirs {
			_ = os.WriteFile(filepath.Join(d.ownDir, "tasks"), []byte("0"), 0)
		}
	}()
	called := false
	err := c.ForkInside(func() error { called = true; return nil })
	if !errors.Is(err, ErrNotSupported) || called {
		t.Fatalf("a thread moved away: ForkInside = %v (fork called: %v), want ErrNotSupported without a fork", err, called)
	}
	if got, want := cgroupOf(t, "/proc/thread-self/cgroup").v1["pids"], relOf(h, elsewhere, "pids"); got != want {
		t.Fatalf("the refused thread moved: pids at %q, want %q", got, want)
	}
}

// The workload's tasks file, opened by us, lets an unprivileged process
// move itself there by writing "0": the kernel checks the opener's
// credentials. That is how a sandbox's pid 1 completes the split.
func TestWorkloadTasksSelfMoveReal(t *testing.T) {
	h := realHierarchy(t)
	c := create(t, h, "selfmove", Limits{Pids: 32})
	if err := c.ReservePids(5); h.Version() != 1 {
		if !errors.Is(err, ErrNotSupported) {
			t.Fatalf("v2: ReservePids = %v, want ErrNotSupported", err)
		}
		return
	} else if err != nil {
		t.Fatal(err)
	}
	d := c.dirFor("pids")
	for p, want := range map[string]int64{filepath.Join(d, "pids.max"): 37, filepath.Join(d, WorkloadName, "pids.max"): 32} {
		if got, err := readInt(p); err != nil || got != want {
			t.Fatalf("%s = %d, %v; want %d", p, got, err, want)
		}
	}
	if err := c.ReservePids(5); err != nil { // idempotent: the reserve is not added twice
		t.Fatal(err)
	}
	if got, _ := readInt(filepath.Join(d, "pids.max")); got != 37 {
		t.Fatalf("a second ReservePids raised pids.max to %d", got)
	}
	f, err := c.WorkloadTasks()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("sh", "-c", `printf 0 >&3 && exec sleep 30`)
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	ch := make(chan error, 1)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { ch <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-ch })
	in := false
	for range 200 {
		if in, err = c.InWorkload(cmd.Process.Pid); err != nil || in {
			break
		}
		select {
		case err := <-ch:
			t.Fatalf("the unprivileged child exited (%v) instead of moving itself", err)
		default:
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil || !in {
		t.Fatalf("the unprivileged child did not move itself into the workload: %v, %v", in, err)
	}
}

// relOf is the path of c in controller's hierarchy, as /proc/*/cgroup says it.
func relOf(h *Hierarchy, c *Cgroup, controller string) string {
	for _, d := range h.dirs {
		if slices.Contains(d.controllers, controller) {
			return filepath.Join(d.rel, c.name)
		}
	}
	return ""
}
