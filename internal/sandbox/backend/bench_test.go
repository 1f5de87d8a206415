package backend_test

import (
	"bufio"
	"context"

	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/backend"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside"
	"github.com/ironclaw/ironclaw/internal/testutil/gobuild"
)

// The test binary is also the native init and the OCI helper, as the
// ironclaw binary is.
func TestMain(m *testing.M) {
	if inside.Entered() {
		inside.Main()
	}
	code := m.Run()
	closeAll()
	gobuild.Cleanup()
	os.Exit(code)
}

var (
	mu     sync.Mutex
	opened = map[string]sandbox.Runtime{}
)

// open returns the named backend, shared by the benchmarks, or skips with
// the reason this host cannot run it.
func open(b *testing.B, name string) sandbox.Runtime {
	b.Helper()
	mu.Lock()
	defer mu.Unlock()
	if rt, ok := opened[name]; ok {
		return rt
	}
	rt, err := backend.Open(context.Background(), backend.Options{Name: name, Exe: os.Getenv("IRONCLAW_TEST_INIT_EXE")})
	if err != nil {
		b.Skipf("%s: %v", name, err)
	}
	opened[name] = rt
	return rt
}

func closeAll() {
	mu.Lock()
	defer mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, rt := range opened {
		rt.Close(ctx)
	}
}

func backends() []string { return backend.Names() }

func report(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// Create -> the first exec's result, then destroy (outside the timer's
// meaning: the latency recorded is create + first exec).
func BenchmarkCreateToFirstExec(b *testing.B) {
	for _, name := range backends() {
		b.Run(name, func(b *testing.B) {
			rt := open(b, name)
			ctx := context.Background()
			var lat []time.Duration
			b.ResetTimer() // opening a backend (a probe sandbox) is not a create
			for i := 0; i < b.N; i++ {
				start := time.Now()
				sb, err := rt.Create(ctx, sandbox.Spec{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				b.StopTimer()
				sb.Destroy(ctx)
				b.StartTimer()
			}
			report(b, lat)
		})
	}
}

// Exec round trip of `true` into a running sandbox.
func BenchmarkExecRoundTrip(b *testing.B) {
	for _, name := range backends() {
		b.Run(name, func(b *testing.B) {
			rt := open(b, name)
			ctx := context.Background()
			sb, err := rt.Create(ctx, sandbox.Spec{})
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Destroy(ctx)
			var lat []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			report(b, lat)
		})
	}
}

// memAvailable is the host's MemAvailable in bytes.
func memAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// Idle sandboxes: how fast they are created (idleWorkers at a time), what each costs
// the host (MemAvailable before and after, so kernel memory, page tables
// and a runtime's own processes count too), and how many would fit in the
// memory available now. The count is -idle (default 50).
func BenchmarkIdle(b *testing.B) {
	for _, name := range backends() {
		b.Run(name, func(b *testing.B) {
			rt := open(b, name)
			ctx := context.Background()
			n := idleCount
			for i := 0; i < b.N; i++ {
				runtime.GC()
				time.Sleep(time.Second)
				before := memAvailable()
				boxes := make([]sandbox.Sandbox, n)
				start := time.Now()
				var wg sync.WaitGroup
				var errMu sync.Mutex
				var firstErr error
				work := make(chan int)
				for range idleWorkers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for j := range work {
							sb, err := rt.Create(ctx, sandbox.Spec{})
							if err != nil {
								errMu.Lock()
								firstErr = err
								errMu.Unlock()
								continue
							}
							boxes[j] = sb
						}
					}()
				}
				for j := range n {
					work <- j
				}
				close(work)
				wg.Wait()
				elapsed := time.Since(start)
				if firstErr != nil {
					b.Fatal(firstErr)
				}
				time.Sleep(2 * time.Second) // let the sandboxes settle
				per := (before - memAvailable()) / int64(n)
				// What the sandboxes' own cgroups are charged: less noisy
				// than the host's MemAvailable, which other processes move.
				var charged int64
				for _, sb := range boxes {
					if st, err := sb.Stats(ctx); err == nil {
						charged += st.MemoryBytes
					}
				}
				b.ReportMetric(float64(charged)/float64(n)/(1<<20), "MiB/sandbox-cgroup")
				b.ReportMetric(float64(n)/elapsed.Seconds(), "creates/s")
				b.ReportMetric(float64(per)/(1<<20), "MiB/sandbox-host")
				if per > 0 {
					b.ReportMetric(float64(before/per), "would-fit")
				}
				for _, sb := range boxes {
					sb.Destroy(ctx)
				}
			}
		})
	}
}

var idleCount = func() int {
	if v, err := strconv.Atoi(os.Getenv("IRONCLAW_BENCH_IDLE")); err == nil && v > 0 {
		return v
	}
	return 50
}()

// idleWorkers is how many creates run at once in BenchmarkIdle
// (IRONCLAW_BENCH_WORKERS, default 8: a create mostly waits for the kernel).
var idleWorkers = func() int {
	if v, err := strconv.Atoi(os.Getenv("IRONCLAW_BENCH_WORKERS")); err == nil && v > 0 {
		return v
	}
	return 8
}()

// Pause then resume of a running sandbox with a process in it, on every
// backend that can (the figures in docs/backends.md).
func BenchmarkPauseResume(b *testing.B) {
	for _, name := range backends() {
		b.Run(name, func(b *testing.B) {
			rt := open(b, name)
			ctx := context.Background()
			sb, err := rt.Create(ctx, sandbox.Spec{})
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Destroy(ctx)
			p, ok := sb.(interface {
				Pause(context.Context) error
				Resume(context.Context) error
			})
			if !ok {
				b.Skipf("%s cannot pause", name)
			}
			bg, cancel := context.WithCancel(ctx)
			defer cancel()
			go sb.Exec(bg, sandbox.ExecRequest{Argv: []string{"sleep", "3600"}, Background: true})
			var pause, resume []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if err := p.Pause(ctx); err != nil {
					b.Fatal(err)
				}
				mid := time.Now()
				if err := p.Resume(ctx); err != nil {
					b.Fatal(err)
				}
				pause, resume = append(pause, mid.Sub(start)), append(resume, time.Since(mid))
			}
			b.StopTimer()
			slices.Sort(pause)
			slices.Sort(resume)
			b.ReportMetric(float64(pause[len(pause)/2].Microseconds())/1000, "pause-p50-ms")
			b.ReportMetric(float64(resume[len(resume)/2].Microseconds())/1000, "resume-p50-ms")
		})
	}
}
