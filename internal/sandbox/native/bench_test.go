package native_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

// Benchmarks measure inside one long-lived process, as the daemon runs.
// bench/run.sh runs them beside the same work through bwrap, runc and docker.

var (
	holdN       = flag.Int("hold", 1000, "sandboxes BenchmarkHoldIdle keeps at once")
	holdMemMiB  = flag.Int64("hold-mem-floor", 2048, "MiB of MemAvailable below which BenchmarkHoldIdle stops creating, tears down what it made and fails")
	holdBarrier = flag.String("hold-barrier", "", "a directory BenchmarkHoldIdle meets -hold-peers holders in (each in its own process) once all are created, and again once all are checked")
	holdPeers   = flag.Int("hold-peers", 1, "how many holders meet at -hold-barrier")
)

func reportPercentiles(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(ds[len(ds)/2]), "p50-ms")
	b.ReportMetric(ms(ds[min(len(ds)-1, len(ds)*99/100)]), "p99-ms")
}

// BenchmarkCreateToFirstExec: from Create to the first command's result
// (`true`); teardown is outside the timer.
func BenchmarkCreateToFirstExec(b *testing.B) {
	benchCreateToFirstExec(b, sandboxtest.Native(b), func() {})
}

func benchCreateToFirstExec(b *testing.B, r *native.Runtime, beforeEach func()) {
	ctx := context.Background()
	var ds []time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		beforeEach()
		b.StartTimer()
		start := time.Now()
		sb, err := r.Create(ctx, sandbox.Spec{})
		if err != nil {
			b.Fatal(err)
		}
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec: %v %+v", err, res)
		}
		ds = append(ds, time.Since(start))
		b.StopTimer()
		if err := sb.Destroy(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	reportPercentiles(b, ds)
}

// BenchmarkCreateToFirstExecSpares: a cold create and its first result
// (`true`) on runtimes that keep spares, against the same on one that
// keeps none, iteration by iteration in the same process (the refills
// happen outside the timer). spare cgroups: SpareCgroups 2; spare inits:
// SpareInits 2 and SpareCgroups 2, as the daemon runs. over-cold-p50-ms
// is the difference of the p50s (negative: faster).
func BenchmarkCreateToFirstExecSpares(b *testing.B) {
	sandboxtest.Native(b)
	cold := sandboxtest.NewNative(b, native.Options{})
	for _, c := range []struct {
		name string
		opts native.Options
	}{
		{"spare-cgroups", native.Options{SpareCgroups: 2}},
		{"spare-inits", native.Options{SpareCgroups: 2, SpareInits: 2}},
	} {
		b.Run(c.name, func(b *testing.B) {
			spared := sandboxtest.NewNative(b, c.opts)
			ready := func() {
				waitSpares(b, spared, c.opts.SpareCgroups)
				waitSpareInits(b, spared, c.opts.SpareInits)
			}
			var with, without []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				ready()
				b.StartTimer()
				with = append(with, createFirstExec(b, spared))
				b.StopTimer()
				without = append(without, createFirstExec(b, cold))
				b.StartTimer()
			}
			b.StopTimer()
			reportPercentiles(b, slices.Clone(with))
			slices.Sort(with)
			slices.Sort(without)
			p50 := func(d []time.Duration) float64 { return float64(d[len(d)/2]) / float64(time.Millisecond) }
			b.ReportMetric(p50(without), "cold-p50-ms")
			b.ReportMetric(p50(with)-p50(without), "over-cold-p50-ms")
		})
	}
}

// BenchmarkCreateExecQueued: a cold create and its first result (`true`)
// through CreateExec, which queues the command behind the init's message,
// against Create then Exec, iteration by iteration on the same runtime:
// with nothing made ahead (cold) and with spare inits and cgroups, as the
// daemon runs (the refills happen outside the timer). over-unqueued-p50-ms
// is the difference of the p50s (negative: faster).
func BenchmarkCreateExecQueued(b *testing.B) {
	sandboxtest.Native(b)
	for _, c := range []struct {
		name string
		opts native.Options
	}{
		{"cold", native.Options{}},
		{"spare-inits", native.Options{SpareCgroups: 2, SpareInits: 2}},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := sandboxtest.NewNative(b, c.opts)
			ready := func() {
				waitSpares(b, r, c.opts.SpareCgroups)
				waitSpareInits(b, r, c.opts.SpareInits)
			}
			var queued, unqueued []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				ready()
				b.StartTimer()
				queued = append(queued, createExecQueued(b, r))
				b.StopTimer()
				ready()
				unqueued = append(unqueued, createFirstExec(b, r))
				b.StartTimer()
			}
			b.StopTimer()
			reportPercentiles(b, slices.Clone(queued))
			slices.Sort(queued)
			slices.Sort(unqueued)
			p50 := func(d []time.Duration) float64 { return float64(d[len(d)/2]) / float64(time.Millisecond) }
			b.ReportMetric(p50(unqueued), "unqueued-p50-ms")
			b.ReportMetric(p50(queued)-p50(unqueued), "over-unqueued-p50-ms")
		})
	}
}

// createExecQueued is createFirstExec through CreateExec.
func createExecQueued(b *testing.B, r *native.Runtime) time.Duration {
	ctx := context.Background()
	start := time.Now()
	sb, res, err := r.CreateExec(ctx, sandbox.Spec{}, sandbox.ExecRequest{Argv: []string{"true"}})
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("create and exec: %v %+v", err, res)
	}
	d := time.Since(start)
	if err := sb.Destroy(ctx); err != nil {
		b.Fatal(err)
	}
	return d
}

// createFirstExec creates a default sandbox on r, runs `true` in it and
// returns how long that took; the sandbox is destroyed after.
func createFirstExec(b *testing.B, r *native.Runtime) time.Duration {
	ctx := context.Background()
	start := time.Now()
	sb, err := r.Create(ctx, sandbox.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	if res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
		b.Fatalf("exec: %v %+v", err, res)
	}
	d := time.Since(start)
	if err := sb.Destroy(ctx); err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkCreateExecDestroy: the whole life of a one-shot sandbox.
func BenchmarkCreateExecDestroy(b *testing.B) {
	r := sandboxtest.Native(b)
	ctx := context.Background()
	var ds []time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		sb, err := r.Create(ctx, sandbox.Spec{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		if err := sb.Destroy(ctx); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	reportPercentiles(b, ds)
}

// BenchmarkExecRoundTrip: one command into a running sandbox, request to
// result. "true" pays a fork and exec of a dynamic binary inside; the
// probe's "noop" is a static binary.
func BenchmarkExecRoundTrip(b *testing.B) {
	box := probeBox(b, sandbox.Spec{})
	ctx := context.Background()
	for _, argv := range [][]string{{"true"}, {"/probe"}} {
		b.Run(filepath.Base(argv[0]), func(b *testing.B) {
			var ds []time.Duration
			req := sandbox.ExecRequest{Argv: argv, Env: []string{"IRONCLAW_PROBE=noop"}}
			for i := 0; i < b.N; i++ {
				start := time.Now()
				res, err := box.SB.Exec(ctx, req)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("exec: %v %+v", err, res)
				}
				ds = append(ds, time.Since(start))
			}
			reportPercentiles(b, ds)
		})
	}
}

// BenchmarkIdleMemory: memory charged to each idle sandbox's cgroup, and
// the resident size of its pid-1 agent.
func BenchmarkIdleMemory(b *testing.B) {
	r := sandboxtest.Native(b)
	ctx := context.Background()
	const n = 20
	for i := 0; i < b.N; i++ {
		var boxes []sandbox.Sandbox
		for j := 0; j < n; j++ {
			sb, err := r.Create(ctx, sandbox.Spec{})
			if err != nil {
				b.Fatal(err)
			}
			boxes = append(boxes, sb)
		}
		time.Sleep(500 * time.Millisecond) // let each agent settle after setup
		var charged, rss, threads int64
		for _, sb := range boxes {
			st, err := sb.Stats(ctx)
			if err != nil {
				b.Fatal(err)
			}
			charged += st.MemoryBytes
			pid := sb.(*native.Sandbox).InitPid()
			rss += vmRSS(pid)
			threads += statusField(pid, "Threads:")
		}
		b.ReportMetric(float64(charged)/n, "charged-bytes/sandbox")
		b.ReportMetric(float64(rss)/n, "agent-rss-bytes/sandbox")
		// Each thread is a pid of the host's kernel.pid_max.
		b.ReportMetric(float64(threads)/n, "init-threads/sandbox")
		for _, sb := range boxes {
			if err := sb.Destroy(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkHolderMemory: the memory the holding process (the daemon)
// keeps resident for each sandbox it holds, in steady state. A first round
// of sandboxes is made and torn down and its memory handed back to the
// kernel, as a daemon's churn does, so that the second round reuses freed
// heap (which the Go runtime zeroes, touching every page) rather than
// untouched fresh memory; each of the second round answers one exec.
func BenchmarkHolderMemory(b *testing.B) {
	r := sandboxtest.Native(b)
	ctx := context.Background()
	const n = 200
	round := func() []sandbox.Sandbox {
		boxes := make([]sandbox.Sandbox, 0, n)
		for j := 0; j < n; j++ {
			sb, err := r.Create(ctx, sandbox.Spec{})
			if err != nil {
				b.Fatal(err)
			}
			if res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
				b.Fatalf("exec: %v %+v", err, res)
			}
			boxes = append(boxes, sb)
		}
		return boxes
	}
	destroy := func(boxes []sandbox.Sandbox) {
		for _, sb := range boxes {
			if err := sb.Destroy(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	for i := 0; i < b.N; i++ {
		destroy(round())
		debug.FreeOSMemory()
		before := vmRSS(os.Getpid())
		boxes := round()
		held := vmRSS(os.Getpid())
		b.ReportMetric(float64(held-before)/n, "holder-rss-bytes/sandbox")
		destroy(boxes)
	}
}

func vmRSS(pid int) int64 { return statusField(pid, "VmRSS:") << 10 }

// statusField is a number from /proc/PID/status (the kB of a Vm field), or
// 0.
func statusField(pid int, field string) int64 {
	return procField(fmt.Sprintf("/proc/%d/status", pid), field)
}

// procField is the number after field in a /proc file of "Name: value"
// lines (kB where it has a unit), or 0.
func procField(path, field string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// BenchmarkHoldIdle holds -hold sandboxes at once, checks every one still
// answers, tears them all down and checks nothing is left.
func BenchmarkHoldIdle(b *testing.B) {
	r := sandboxtest.Native(b)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		before := cgroupCount(b)
		fds0, tasks0, mem0 := openFDs(b), hostTasks(b), memAvailable(b)
		boxes := make([]sandbox.Sandbox, *holdN)
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, *holdN)
		var stop atomic.Bool
		sem := make(chan struct{}, 4)
		for j := range boxes {
			wg.Add(1)
			sem <- struct{}{}
			go func(j int) {
				defer wg.Done()
				defer func() { <-sem }()
				if stop.Load() {
					return
				}
				// The host's memory, not the holder's, is what runs out
				// first (the kernel's per-cgroup shrinker maps grow with
				// the square of the count): stop well before the VM would.
				if avail := memAvailable(b); avail < *holdMemMiB<<20 {
					if !stop.Swap(true) {
						errs <- fmt.Errorf("stopped creating at sandbox %d of %d: MemAvailable %d MiB is under -hold-mem-floor", j, len(boxes), avail>>20)
					}
					return
				}
				sb, err := r.Create(ctx, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 64 << 20}})
				if err != nil {
					stop.Store(true)
					errs <- err
					return
				}
				boxes[j] = sb
			}(j)
		}
		wg.Wait()
		created := time.Since(start)
		close(errs)
		if err := <-errs; err != nil {
			made := 0
			for _, sb := range boxes {
				if sb != nil {
					made++
					_ = sb.Destroy(ctx)
				}
			}
			b.Fatalf("create (%d made, destroyed again): %v", made, err)
		}
		// What each held sandbox costs the holder and the host: the
		// holder's descriptors (RLIMIT_NOFILE) and the host's tasks
		// (kernel.pid_max), counted once every create has returned.
		fds, tasks, mem := openFDs(b)-fds0, hostTasks(b)-tasks0, mem0-memAvailable(b)
		// Holders in other processes (one process's descriptors may not
		// be enough for all: see netlimit.RaiseFileLimit) hold theirs
		// beside these until every one has checked its own.
		meet(b, "created")
		b.ReportMetric(float64(hostSandboxes(b)), "host-sandboxes-at-peak")
		for j, sb := range boxes {
			if res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
				b.Fatalf("sandbox %d of %d does not answer: %v", j, len(boxes), err)
			}
		}
		meet(b, "checked")
		start = time.Now()
		for _, sb := range boxes {
			wg.Add(1)
			sem <- struct{}{}
			go func(sb sandbox.Sandbox) {
				defer wg.Done()
				defer func() { <-sem }()
				if err := sb.Destroy(ctx); err != nil {
					b.Error(err)
				}
			}(sb)
		}
		wg.Wait()
		b.ReportMetric(created.Seconds(), "create-all-s")
		b.ReportMetric(time.Since(start).Seconds(), "destroy-all-s")
		b.ReportMetric(float64(*holdN), "sandboxes")
		b.ReportMetric(float64(fds)/float64(*holdN), "holder-fds/sandbox")
		b.ReportMetric(float64(tasks)/float64(*holdN), "host-tasks/sandbox")
		b.ReportMetric(float64(mem)/float64(*holdN), "host-mem-bytes/sandbox")
		if after := cgroupCount(b); after != before {
			b.Fatalf("cgroups left: %d before, %d after", before, after)
		}
	}
}

// meet waits at -hold-barrier until -hold-peers holders have reached
// phase; without -hold-barrier it returns at once.
func meet(b *testing.B, phase string) {
	if *holdBarrier == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(*holdBarrier, fmt.Sprintf("%s.%d", phase, os.Getpid())), nil, 0o644); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Minute)
	for {
		here, err := filepath.Glob(filepath.Join(*holdBarrier, phase+".*"))
		if err != nil {
			b.Fatal(err)
		}
		if len(here) >= *holdPeers {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d holders %s after 30 minutes", len(here), *holdPeers, phase)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// hostSandboxes is how many native sandboxes the host runs: processes
// whose command line is a native init's or the steward's.
func hostSandboxes(b *testing.B) int {
	des, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, de := range des {
		if de.Name()[0] < '0' || de.Name()[0] > '9' {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + de.Name() + "/cmdline")
		if err != nil {
			continue // gone
		}
		arg0, _, _ := strings.Cut(string(cmd), "\x00")
		switch arg0 {
		case "ironclaw-steward-init", "ironclaw-steward", "ironclaw-sandbox-init", "ironclaw-sandbox-resume":
			n++
		}
	}
	return n
}

// openFDs is how many descriptors this process holds.
func openFDs(b testing.TB) int {
	des, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		b.Fatal(err)
	}
	return len(des)
}

// memAvailable is the host's MemAvailable, in bytes: what it could still
// give without swapping, page cache included.
func memAvailable(b *testing.B) int64 {
	n := procField("/proc/meminfo", "MemAvailable:")
	if n == 0 {
		b.Fatal("no MemAvailable in /proc/meminfo")
	}
	return n << 10
}

// hostTasks is how many tasks (threads) the host's kernel runs: the
// second number of /proc/loadavg's fourth field.
func hostTasks(b *testing.B) int {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(data))
	if len(f) < 4 {
		b.Fatalf("/proc/loadavg: %q", data)
	}
	_, total, _ := strings.Cut(f[3], "/")
	n, err := strconv.Atoi(total)
	if err != nil {
		b.Fatalf("/proc/loadavg: %q", data)
	}
	return n
}

// BenchmarkCreateToFirstExecPooled: the same as BenchmarkCreateToFirstExec
// when the pool has a sandbox ready (the refill happens outside the timer;
// its rate is BenchmarkCreateToFirstExec's).
func BenchmarkCreateToFirstExecPooled(b *testing.B) {
	r := newPooledRuntime(b, 2)
	benchCreateToFirstExec(b, r, func() { waitPool(b, r, 2) })
}

// BenchmarkHostExecTrue is the floor for BenchmarkExecRoundTrip: os/exec of
// the same `true` on the host, no sandbox, in the same run.
func BenchmarkHostExecTrue(b *testing.B) {
	var ds []time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	reportPercentiles(b, ds)
}
