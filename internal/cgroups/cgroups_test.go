package cgroups

// These tests use the real cgroup file system and therefore need root. On
// the development machine (cgroup v1 hybrid) they exercise the v1 code
// paths end to end, including enforcement by the kernel. The v2 code paths
// are covered by sim_test.go against a simulated cgroup2 tree; real v2
// enforcement is NOT tested on that machine.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const helperEnv = "IRONCLAW_CGROUPS_TEST_HELPER"

// TestMain lets the test binary double as a child process that allocates
// memory, so the OOM test needs no external tools.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "alloc" {
		allocHelper()
		return
	}
	os.Exit(m.Run())
}

// allocHelper waits for a line on stdin, then allocates and touches 200MiB.
func allocHelper() {
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	var keep [][]byte
	for i := 0; i < 200; i++ {
		b := make([]byte, 1<<20)
		for j := 0; j < len(b); j += 4096 {
			b[j] = 1 // touch every page so it is really charged
		}
		keep = append(keep, b)
	}
	fmt.Printf("survived %d MiB\n", len(keep))
	os.Exit(0)
}

// realHierarchy detects the real hierarchy, skipping when that is impossible,
// and removes the ironclaw folders it had to create when the test ends.
func realHierarchy(t *testing.T) *Hierarchy {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: real cgroup tests need root")
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	ops := hostOps()
	var created []string
	var mu sync.Mutex
	mkdir := ops.mkdir
	ops.mkdir = func(p string) error {
		err := mkdir(p)
		if err == nil {
			mu.Lock()
			created = append(created, p)
			mu.Unlock()
		}
		return err
	}
	h, err := detect(sysEnv{mountinfo: mi, cgroup: cg, pid: os.Getpid(), ops: ops, folderOverride: testFolder()})
	if err != nil {
		t.Skipf("skipping: no usable cgroup hierarchy: %v", err)
	}
	// Only the folders Detect made; sandbox dirs are removed by Destroy.
	folders := slices.Clone(created)
	t.Cleanup(func() {
		for i := len(folders) - 1; i >= 0; i-- {
			if err := unix.Rmdir(folders[i]); err != nil && !errors.Is(err, unix.ENOENT) {
				t.Logf("leaving %s: %v", folders[i], err)
			}
		}
	})
	return h
}

// testFolder replaces "ironclaw" in the real tests, so that they share
// nothing with a daemon or another test run on the same host.
func testFolder() string { return fmt.Sprintf("ironclaw-test-%d", os.Getpid()) }

// testName returns a cgroup name unique to this process and test.
func testName(t *testing.T, suffix string) string {
	n := fmt.Sprintf("ictest-%d-%s-%s", os.Getpid(), t.Name(), suffix)
	return strings.NewReplacer("/", "_", " ", "_").Replace(n)
}

// create makes a cgroup that is destroyed when the test ends, whatever happens.
func create(t *testing.T, h *Hierarchy, suffix string, l Limits) *Cgroup {
	t.Helper()
	c, err := h.Create(testName(t, suffix), l)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := c.Destroy(ctx); err != nil {
			t.Errorf("cleanup Destroy: %v", err)
		}
	})
	return c
}

// child is a process started outside the cgroup and moved into it before
// it does any work: it blocks until go() sends it a line on stdin.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
	state *os.ProcessState
}

func startChild(t *testing.T, c *Cgroup, env []string, name string, args ...string) *child {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	ch := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 100), done: make(chan struct{})}
	go func() {
		defer r.Close()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch.lines <- sc.Text()
		}
		close(ch.lines)
	}()
	go func() {
		_ = cmd.Wait()
		ch.state = cmd.ProcessState
		close(ch.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-ch.done
	})
	if c != nil {
		if err := c.Add(cmd.Process.Pid); err != nil {
			t.Fatalf("Add(%d): %v", cmd.Process.Pid, err)
		}
	}
	return ch
}

func (ch *child) start(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(ch.stdin, "go\n"); err != nil {
		t.Fatalf("write to child: %v", err)
	}
}

func (ch *child) line(t *testing.T, timeout time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-ch.lines:
		if !ok {
			t.Fatal("child output ended without a line")
		}
		return l
	case <-time.After(timeout):
		t.Fatalf("no output from child within %v", timeout)
	}
	return ""
}

func (ch *child) wait(t *testing.T, timeout time.Duration) *os.ProcessState {
	t.Helper()
	select {
	case <-ch.done:
		return ch.state
	case <-time.After(timeout):
		t.Fatalf("child %d did not exit within %v", ch.cmd.Process.Pid, timeout)
	}
	return nil
}

func killedBySIGKILL(st *os.ProcessState) bool {
	ws, ok := st.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func readTrim(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestDetectReal(t *testing.T) {
	h := realHierarchy(t)
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	// Oracle: memory is bound to at most one hierarchy, so v1 is expected
	// exactly when a v1 memory hierarchy is mounted.
	want := 2
	mounts, err := parseMountinfo(mi)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if m.fsType == "cgroup" && m.superOpts["memory"] {
			want = 1
		}
	}
	if h.Version() != want {
		t.Fatalf("Version() = %d, want %d", h.Version(), want)
	}
	// Describe must name where the sandbox cgroups go, which is below our
	// own memory cgroup as listed in /proc/self/cgroup.
	cg, _ := os.ReadFile("/proc/self/cgroup")
	var own string
	for _, l := range strings.Split(string(cg), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) == 3 && ((want == 1 && slices.Contains(strings.Split(parts[1], ","), "memory")) || (want == 2 && parts[0] == "0")) {
			own = parts[2]
		}
	}
	ownDir := own
	if want == 2 && filepath.Base(own) == daemonLeaf {
		ownDir = filepath.Dir(own)
	}
	wantPath := filepath.Join(ownDir, testFolder())
	d := h.Describe()
	t.Logf("Describe: %s", d)
	if !strings.Contains(d, wantPath) || !strings.HasPrefix(d, fmt.Sprintf("cgroup v%d (", want)) {
		t.Fatalf("Describe() = %q, want it to mention cgroup v%d and %s", d, want, wantPath)
	}
	for _, ctl := range []string{"memory", "pids", "cpu"} {
		if !strings.Contains(d, ctl) {
			t.Errorf("Describe() = %q lacks %s", d, ctl)
		}
	}

	// The public Detect uses the real folder name; remove the folders it
	// makes unless they were there before (a daemon may be using them).
	var made []string
	for _, dir := range h.dirs {
		real := filepath.Join(filepath.Dir(dir.base), folderName)
		if !exists(real) {
			made = append(made, real)
		}
	}
	t.Cleanup(func() {
		for _, p := range made {
			if err := unix.Rmdir(p); err != nil && !errors.Is(err, unix.ENOENT) {
				t.Logf("leaving %s: %v", p, err)
			}
		}
	})
	h2, err := Detect()
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	want2 := strings.ReplaceAll(d, testFolder(), folderName)
	if h2.Describe() != want2 {
		t.Errorf("Detect() describes %q, want %q", h2.Describe(), want2)
	}
	for _, dir := range h2.dirs {
		if !exists(dir.base) {
			t.Errorf("Detect did not create %s", dir.base)
		}
	}
	// Detect is idempotent.
	h3, err := Detect()
	if err != nil || h3.Describe() != want2 {
		t.Errorf("second Detect: %v, %v", h3, err)
	}
}

func TestCreateWritesLimitsReal(t *testing.T) {
	h := realHierarchy(t)
	if h.Version() != 1 {
		t.Skip("skipping: v1 file checks; this host uses v2 (covered by sim_test.go)")
	}
	const unlimitedMem = "9223372036854771712" // LONG_MAX rounded down to a page
	tests := []struct {
		name                    string
		l                       Limits
		mem, pids, quota, perio string
	}{
		{"all", Limits{MemoryBytes: 64 << 20, Pids: 42, CPUs: 0.5}, "67108864", "42", "50000", "100000"},
		{"big", Limits{MemoryBytes: 1 << 30, Pids: 1, CPUs: 2.5}, "1073741824", "1", "250000", "100000"},
		{"none", Limits{}, unlimitedMem, "max", "-1", "100000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := create(t, h, tc.name, tc.l)
			mem := c.dirFor("memory")
			if got := readTrim(t, filepath.Join(mem, "memory.limit_in_bytes")); got != tc.mem {
				t.Errorf("memory.limit_in_bytes = %s, want %s", got, tc.mem)
			}
			if p := filepath.Join(mem, "memory.memsw.limit_in_bytes"); exists(p) {
				if got := readTrim(t, p); got != tc.mem {
					t.Errorf("memory.memsw.limit_in_bytes = %s, want %s", got, tc.mem)
				}
			}
			if got := readTrim(t, filepath.Join(c.dirFor("pids"), "pids.max")); got != tc.pids {
				t.Errorf("pids.max = %s, want %s", got, tc.pids)
			}
			if got := readTrim(t, filepath.Join(c.dirFor("cpu"), "cpu.cfs_quota_us")); got != tc.quota {
				t.Errorf("cpu.cfs_quota_us = %s, want %s", got, tc.quota)
			}
			if got := readTrim(t, filepath.Join(c.dirFor("cpu"), "cpu.cfs_period_us")); got != tc.perio {
				t.Errorf("cpu.cfs_period_us = %s, want %s", got, tc.perio)
			}
			st, err := c.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if st.Pids != 0 || st.OOMKills != 0 {
				t.Errorf("fresh cgroup Stats = %+v", st)
			}
			if _, err := c.OpenFD(); !errors.Is(err, ErrNotSupported) {
				t.Errorf("OpenFD on v1: err = %v, want ErrNotSupported", err)
			}
		})
	}
	t.Logf("memory.memsw present: %v", exists(filepath.Join(h.baseFor("memory"), "memory.memsw.limit_in_bytes")))
}

func TestCreateErrorsReal(t *testing.T) {
	h := realHierarchy(t)
	tests := []struct {
		name string
		l    Limits
		want error
	}{
		{"", Limits{}, ErrInvalidName},
		{"a/b", Limits{}, ErrInvalidName},
		{"..", Limits{}, ErrInvalidName},
		{".", Limits{}, ErrInvalidName},
		{"a b", Limits{}, ErrInvalidName},
		{strings.Repeat("a", 129), Limits{}, ErrInvalidName},
		{"cgroup.procs", Limits{}, ErrInvalidName}, // a control file in every hierarchy
		{"pids.max", Limits{}, ErrInvalidName},     // exists only in some hierarchies
		{"cpu.stat", Limits{}, ErrInvalidName},
		{"ok-neg", Limits{MemoryBytes: -1}, ErrInvalidLimits},
		{"ok-tiny-cpu", Limits{CPUs: 0.001}, ErrInvalidLimits},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := h.Create(tc.name, tc.l)
			if !errors.Is(err, tc.want) {
				if c != nil {
					_ = c.Destroy(testCtx(t))
				}
				t.Fatalf("Create(%q) err = %v, want %v", tc.name, err, tc.want)
			}
			// Nothing may be left behind in any hierarchy.
			if validName(tc.name) {
				for _, d := range h.dirs {
					p := filepath.Join(d.base, tc.name)
					if fi, err := os.Stat(p); err == nil && fi.IsDir() {
						t.Errorf("left behind %s", p)
					}
				}
			}
		})
	}
	t.Run("double", func(t *testing.T) {
		c := create(t, h, "double", Limits{Pids: 5})
		_, err := h.Create(c.Name(), Limits{})
		if !errors.Is(err, ErrExist) || !errors.Is(err, fs.ErrExist) {
			t.Fatalf("second Create err = %v, want ErrExist", err)
		}
		// The failed Create must not have touched the existing cgroup.
		if got := readTrim(t, filepath.Join(c.dirFor("pids"), "pids.max")); got != "5" {
			t.Errorf("pids.max = %s after failed re-create, want 5", got)
		}
	})
}

func TestCreateRecreatesFolderReal(t *testing.T) {
	h := realHierarchy(t)
	for _, d := range h.dirs {
		if err := unix.Rmdir(d.base); err != nil {
			t.Fatalf("rmdir %s: %v", d.base, err)
		}
	}
	c := create(t, h, "recreate", Limits{Pids: 3})
	if got := readTrim(t, filepath.Join(c.dirFor("pids"), "pids.max")); got != "3" {
		t.Errorf("pids.max = %s, want 3", got)
	}
}

func TestDestroyReal(t *testing.T) {
	h := realHierarchy(t)
	c := create(t, h, "destroy", Limits{MemoryBytes: 16 << 20, Pids: 10, CPUs: 1})
	ch := startChild(t, c, nil, "sleep", "300")
	dirs := c.dirs()
	for _, d := range dirs {
		if !exists(d) {
			t.Fatalf("%s missing after Create", d)
		}
	}
	start := time.Now()
	if err := c.Destroy(testCtx(t)); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	t.Logf("Destroy with one process took %v", time.Since(start))
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still exists after Destroy (err %v)", d, err)
		}
	}
	if st := ch.wait(t, 5*time.Second); !killedBySIGKILL(st) {
		t.Errorf("process ended with %v, want SIGKILL", st)
	}
	start = time.Now()
	if err := c.Destroy(testCtx(t)); err != nil {
		t.Fatalf("second Destroy: %v", err)
	}
	t.Logf("second (no-op) Destroy took %v", time.Since(start))
	if _, err := c.Pids(); err == nil {
		t.Error("Pids of a destroyed cgroup: want an error")
	}
}

func TestPidsLimitReal(t *testing.T) {
	h := realHierarchy(t)
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("skipping: perl is needed to report fork's errno")
	}
	c := create(t, h, "pids", Limits{Pids: 10})
	// perl reports the errno of the first failed fork; children sleep so
	// they keep counting against pids.max.
	script := `$| = 1; <STDIN>; my $n = 0;
for (1..50) {
  my $p = fork;
  if (!defined $p) { printf "forkfail errno=%d after=%d msg=%s\n", $!+0, $n, $!; sleep 60; exit 0 }
  if ($p == 0) { sleep 60; exit 0 }
  $n++;
}
print "nofail after=$n\n"; sleep 60;`
	ch := startChild(t, c, nil, "perl", "-e", script)
	ch.start(t)
	l := ch.line(t, 10*time.Second)
	t.Logf("child: %s", l)
	want := fmt.Sprintf("forkfail errno=%d ", int(unix.EAGAIN))
	if !strings.HasPrefix(l, want) || !strings.Contains(l, "Resource temporarily unavailable") {
		t.Fatalf("child said %q, want fork to fail with EAGAIN", l)
	}
	var after int
	if _, err := fmt.Sscanf(strings.Fields(l)[2], "after=%d", &after); err != nil || after > 9 {
		t.Errorf("forked %d children before failing (err %v), want <= 9", after, err)
	}
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Stats: %+v", st)
	if st.Pids > 10 || st.Pids < 2 {
		t.Errorf("Stats().Pids = %d, want 2..10", st.Pids)
	}
}

func TestMemoryLimitReal(t *testing.T) {
	h := realHierarchy(t)
	c := create(t, h, "mem", Limits{MemoryBytes: 32 << 20})
	counter, err := c.OpenOOMCounter() // opened before the kill: a kept descriptor must see it
	if err != nil {
		t.Fatal(err)
	}
	defer counter.Close()
	if n, err := counter.Read(); err != nil || n != 0 {
		t.Fatalf("OOMCounter.Read() before any kill = %d, %v; want 0", n, err)
	}
	ch := startChild(t, c, []string{helperEnv + "=alloc"}, os.Args[0], "-test.run=^$")
	ch.start(t)
	st := ch.wait(t, 30*time.Second)
	if !killedBySIGKILL(st) {
		out := ""
		for l := range ch.lines {
			out += l + "\n"
		}
		t.Fatalf("allocating 200MiB under a 32MiB limit ended with %v, want SIGKILL; output: %s", st, out)
	}
	s, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Stats: %+v", s)
	if s.OOMKills < 1 {
		t.Errorf("Stats().OOMKills = %d, want >= 1", s.OOMKills)
	}
	if n, err := counter.Read(); err != nil || n != s.OOMKills {
		t.Errorf("OOMCounter.Read() after the kill = %d, %v; want Stats().OOMKills %d", n, err, s.OOMKills)
	}
	if s.MemoryPeakBytes > 33<<20 {
		t.Errorf("MemoryPeakBytes = %d exceeds the 32MiB limit", s.MemoryPeakBytes)
	}
}

func TestCPULimitReal(t *testing.T) {
	h := realHierarchy(t)
	c := create(t, h, "cpu", Limits{CPUs: 0.2})
	startChild(t, c, nil, "/bin/sh", "-c", "read x; while :; do :; done").start(t)
	time.Sleep(time.Second)
	s, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("busy loop for 1s wall under 0.2 CPUs used %v", s.CPUUsage)
	// The lower bound proves the loop ran inside the cgroup at all.
	if s.CPUUsage > 350*time.Millisecond || s.CPUUsage < 50*time.Millisecond {
		t.Errorf("CPUUsage = %v, want 50ms..350ms", s.CPUUsage)
	}
}

func TestKillReal(t *testing.T) {
	h := realHierarchy(t)
	c := create(t, h, "kill", Limits{})
	var kids []*child
	var want []int
	for i := 0; i < 5; i++ {
		ch := startChild(t, c, nil, "sleep", "300")
		kids = append(kids, ch)
		want = append(want, ch.cmd.Process.Pid)
	}
	slices.Sort(want)
	got, err := c.Pids()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Pids() = %v, want %v", got, want)
	}
	// A process that forks after being moved in: its children are found
	// through cgroup.procs only.
	forker := startChild(t, c, nil, "/bin/sh", "-c", "read x; sleep 300 & sleep 300 & echo forked; wait")
	forker.start(t)
	if l := forker.line(t, 5*time.Second); l != "forked" {
		t.Fatalf("forker said %q", l)
	}
	if got, _ := c.Pids(); len(got) != 8 {
		t.Fatalf("Pids() = %v, want 8 processes", got)
	}
	start := time.Now()
	if err := c.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	t.Logf("Kill of 8 processes took %v", time.Since(start))
	if got, err := c.Pids(); err != nil || len(got) != 0 {
		t.Fatalf("after Kill Pids() = %v, %v; want empty", got, err)
	}
	for _, ch := range append(kids, forker) {
		if st := ch.wait(t, 5*time.Second); !killedBySIGKILL(st) {
			t.Errorf("pid %d ended with %v, want SIGKILL", ch.cmd.Process.Pid, st)
		}
	}
	if h.has("freezer") {
		if got := readTrim(t, filepath.Join(c.dirFor("freezer"), "freezer.state")); got != "THAWED" {
			t.Errorf("freezer.state = %s after Kill, want THAWED", got)
		}
	}
	// The cgroup stays usable after Kill.
	ch := startChild(t, c, nil, "sleep", "300")
	if got, _ := c.Pids(); !slices.Equal(got, []int{ch.cmd.Process.Pid}) {
		t.Errorf("Pids() after re-adding = %v", got)
	}
}

func TestCollectReal(t *testing.T) {
	h := realHierarchy(t)
	keep := create(t, h, "keep", Limits{Pids: 5})
	drop := create(t, h, "drop", Limits{Pids: 5})
	inKeep := startChild(t, keep, nil, "sleep", "300")
	inDrop := startChild(t, drop, nil, "sleep", "300")
	// Reject only our own name, as a daemon would reject only names it
	// knows to be stale.
	removed, err := h.Collect(func(n string) bool { return n != drop.Name() })
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	if !slices.Equal(removed, []string{drop.Name()}) {
		t.Fatalf("Collect removed %v, want [%s]", removed, drop.Name())
	}
	for _, d := range drop.dirs() {
		if exists(d) {
			t.Errorf("%s still exists", d)
		}
	}
	for _, d := range keep.dirs() {
		if !exists(d) {
			t.Errorf("%s was removed", d)
		}
	}
	if st := inDrop.wait(t, 5*time.Second); !killedBySIGKILL(st) {
		t.Errorf("process in collected cgroup ended with %v, want SIGKILL", st)
	}
	if got, _ := keep.Pids(); !slices.Equal(got, []int{inKeep.cmd.Process.Pid}) {
		t.Errorf("kept cgroup Pids() = %v, want [%d]", got, inKeep.cmd.Process.Pid)
	}
}

func TestOOMCounterPresenceReal(t *testing.T) {
	h := realHierarchy(t)
	if h.Version() != 1 {
		t.Skip("skipping: v1 observation")
	}
	c := create(t, h, "oomctl", Limits{})
	b, err := os.ReadFile(filepath.Join(c.dirFor("memory"), "memory.oom_control"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("memory.oom_control: %q; oom_kill counter present: %v", string(b), strings.Contains(string(b), "oom_kill "))
}

// testCtx bounds operations that retry until their context ends, so a
// broken implementation fails the test instead of hanging it.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// SplitPids keeps a reserve of the sandbox's tasks that the forking
// thread's children cannot take: a shell placed like a sandbox's pid 1
// forks until the workload's limit, and the sandbox's own cgroup still has
// the reserve.
func TestHostileSplitPidsReservesTasksForInit(t *testing.T) {
	h := realHierarchy(t)
	if h.Version() != 1 {
		t.Skip("SplitPids is cgroup v1 only")
	}
	c := create(t, h, "split", Limits{Pids: 12})
	ch := startChild(t, c, nil, "sh", "-c", `read _; n=0; while [ $n -lt 40 ]; do sleep 30 & n=$((n+1)); done 2>/dev/null; echo started; wait`)
	if err := c.SplitPids(ch.cmd.Process.Pid, 5); err != nil {
		t.Fatal(err)
	}
	d := c.dirFor("pids")
	for p, want := range map[string]int64{filepath.Join(d, "pids.max"): 17, filepath.Join(d, WorkloadName, "pids.max"): 12} {
		if got, err := readInt(p); err != nil || got != want {
			t.Fatalf("%s = %d, %v; want %d", p, got, err, want)
		}
	}
	ch.start(t)
	// dash gives up (and exits) at the first fork that fails.
	select {
	case <-ch.done:
	case l := <-ch.lines:
		t.Fatalf("all 40 started under a limit of 12: %q", l)
	case <-time.After(30 * time.Second):
		t.Fatal("the shell neither failed to fork nor finished")
	}
	work, _ := readInt(filepath.Join(d, WorkloadName, "pids.current"))
	all, _ := readInt(filepath.Join(d, "pids.current"))
	if work > 12 || all > 12 {
		t.Fatalf("the workload holds %d tasks (sandbox %d) under its limit of 12", work, all)
	}
	if work < 10 {
		t.Fatalf("the workload reached only %d of its 12 tasks", work)
	}
	// The reserve follows an update.
	if err := c.Update(Limits{Pids: 20}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]int64{filepath.Join(d, "pids.max"): 25, filepath.Join(d, WorkloadName, "pids.max"): 20} {
		if got, err := readInt(p); err != nil || got != want {
			t.Fatalf("after Update: %s = %d, %v; want %d", p, got, err, want)
		}
	}
	if err := c.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	if exists(d) {
		t.Fatalf("%s survives Destroy", d)
	}
}

func TestView(t *testing.T) {
	h := realHierarchy(t)
	v := h.View()
	if v.Version != h.Version() {
		t.Fatalf("View version %d on a v%d hierarchy", v.Version, h.Version())
	}
	if v.Version == 2 {
		if len(v.V1) != 0 {
			t.Fatalf("v2 view with v1 mounts: %+v", v)
		}
		return
	}
	names := map[string]bool{}
	for _, m := range v.V1 {
		names[m.Name] = true
		for _, l := range m.Links {
			names[l] = true
		}
		if strings.Contains(m.Name, "freezer") {
			t.Errorf("the view mounts the freezer: %+v", m)
		}
	}
	for _, c := range []string{"memory", "pids", "cpu", "cpuacct"} {
		if !names[c] {
			t.Errorf("the view lacks %s: %+v", c, v.V1)
		}
	}
}

// An empty cgroup is removed by rmdir alone (its workload child first),
// and one holding a child cgroup it did not make falls back to the full
// teardown, which removes that too.
func TestDestroyEmptyReal(t *testing.T) {
	h := realHierarchy(t)
	for _, extra := range []bool{false, true} {
		c := create(t, h, fmt.Sprintf("empty-%v", extra), Limits{MemoryBytes: 16 << 20, Pids: 10, CPUs: 1})
		if err := c.ReservePids(3); err != nil && !errors.Is(err, ErrNotSupported) {
			t.Fatal(err)
		}
		dirs := c.dirs()
		if extra {
			// A child in every controller, as a hand-made one would be.
			for _, d := range dirs {
				if err := os.Mkdir(filepath.Join(d, "stray"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if c.removeIfEmpty() {
				t.Fatal("removeIfEmpty removed a cgroup holding a child it did not make")
			}
		}
		if err := c.Destroy(testCtx(t)); err != nil {
			t.Fatalf("Destroy (stray child %v): %v", extra, err)
		}
		for _, d := range dirs {
			if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s still exists after Destroy (err %v)", d, err)
			}
		}
	}
}

// A cgroup with a process in it is not removed by the rmdir-only path:
// the kernel refuses, and Destroy kills the process first.
func TestRemoveIfEmptyRefusesAPopulatedCgroup(t *testing.T) {
	h := realHierarchy(t)
	c := create(t, h, "populated", Limits{Pids: 10})
	ch := startChild(t, c, nil, "sleep", "300")
	if c.removeIfEmpty() {
		t.Fatal("removeIfEmpty reported a cgroup with a process in it removed")
	}
	if err := c.Destroy(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if st := ch.wait(t, 5*time.Second); !killedBySIGKILL(st) {
		t.Errorf("process ended with %v, want SIGKILL", st)
	}
}
