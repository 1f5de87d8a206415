package native_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/cgroups"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

// exhaustDaemon is the child of TestHostileHostOutOfProcesses: a daemon
// that makes one sandbox (so every thread it needs exists), says "ready",
// waits to be put in a pids cgroup with no room left, and tries again.
func exhaustDaemon() int {
	ctx := context.Background()
	r, err := native.New(ctx, native.Options{Exe: os.Getenv("IRONCLAW_TEST_INIT_EXE")})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	sb, err := r.Create(ctx, sandbox.Spec{})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	_, _ = sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}})
	_ = sb.Destroy(ctx)
	// Spare threads for the Go runtime, made now: once the test holds the
	// pids limit at the threads that exist, a syscall handoff that needs a
	// new thread (the read of stdin below, more often under -race) would
	// be fatal to this process instead of failing the Create. Idle
	// threads are kept and reused.
	var spare sync.WaitGroup
	for range 8 {
		spare.Add(1)
		go func() {
			defer spare.Done()
			ts := syscall.Timespec{Nsec: 50e6}
			_ = syscall.Nanosleep(&ts, nil)
		}()
	}
	spare.Wait()
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	sb, err = r.Create(ctx, sandbox.Spec{})
	if err == nil {
		sb.Destroy(ctx)
		fmt.Println("created")
		return 0
	}
	fmt.Printf("exhausted=%v %v\n", errors.Is(err, sandbox.ErrHostExhausted), err)
	return 0
}

// A host (here: the daemon's own pids cgroup) that cannot start another
// process gives an error that says so, in the class a caller retries
// later: not "not supported on this host".
func TestHostileHostOutOfProcesses(t *testing.T) {
	sandboxtest.Native(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a pids cgroup")
	}
	h, err := cgroups.Detect()
	if err != nil {
		t.Skip(err)
	}
	cg, err := h.Create(fmt.Sprintf("exhaust-test-%d", os.Getpid()), cgroups.Limits{Pids: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Destroy(context.Background())
	exe, _ := os.Executable()
	cmd := exec.Command(exe)
	cmd.Env = []string{"IRONCLAW_TEST_EXHAUST=1", "IRONCLAW_TEST_INIT_EXE=" + os.Getenv("IRONCLAW_TEST_INIT_EXE"), "GOMAXPROCS=1"}
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("the child daemon: %q", lines.Text())
	}
	if err := cg.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	threads := 0
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			threads, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if threads == 0 {
		t.Fatal("no thread count")
	}
	// Not one more task.
	if err := cg.Update(cgroups.Limits{Pids: int64(threads)}); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin, "go")
	done := make(chan string, 1)
	go func() {
		lines.Scan()
		done <- lines.Text()
	}()
	var got string
	select {
	case got = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the child daemon did not answer")
	}
	if !strings.HasPrefix(got, "exhausted=true") || !strings.Contains(got, "out of resources (processes or threads)") {
		t.Fatalf("Create with no processes left on the host: %q", got)
	}
	t.Logf("%s", got)
}

// The PIDs reserved for pid 1 are only its own if its threads are outside
// the workload's share: only the thread commands are forked from may be
// in the pids cgroup's workload child (a thread is born in its maker's
// cgroup, so moving that thread too early takes every thread with it).
func TestHostilePidsReserveHoldsInitThreads(t *testing.T) {
	b := probeBox(t, sandbox.Spec{})
	b.Sh(`true`)
	pid := b.SB.(*native.Sandbox).InitPid()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/cgroup", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads of pid 1: %v", err)
	}
	var in []string
	for _, task := range tasks {
		data, err := os.ReadFile(task)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(data), "\n") {
			if f := strings.SplitN(l, ":", 3); len(f) == 3 && strings.Contains(","+f[1]+",", ",pids,") && strings.HasSuffix(f[2], "/"+cgroups.WorkloadName) {
				in = append(in, task)
			}
		}
	}
	if len(in) == 0 {
		if h, err := cgroups.Detect(); err == nil && h.Version() == 2 {
			t.Skip("cgroup v2: no reserved PIDs")
		}
		t.Fatal("no thread of pid 1 is in the workload's pids cgroup: the limit is not split")
	}
	if want := fmt.Sprintf("/proc/%d/task/%d/cgroup", pid, pid); len(in) != 1 || in[0] != want {
		t.Fatalf("pid 1's threads in the workload's share: %v of %d (only %s may be)", in, len(tasks), want)
	}
}
