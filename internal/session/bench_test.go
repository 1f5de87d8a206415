package session

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/testutil/stack"
)

// unnamedRuntime hides CreateNamed: a runtime that names nothing, so the
// session commits a sandbox's record after its build.
type unnamedRuntime struct{ sandbox.Runtime }

// BenchmarkCreateColdRecord: Manager.Create of the default spec on a
// runtime as the daemon runs it with its pool empty (spare cgroups and
// inits ready, no pool), each iteration once with the record committed
// while the sandbox is built (the runtime names it, createSandbox) and
// once, on the same runtime, store and log, with the record committed
// after the build (the runtime seen without CreateNamed). It reports
// as reportPair does.
func BenchmarkCreateColdRecord(b *testing.B) {
	st := stack.New(b, native.Options{SpareCgroups: defaults.SpareInits, SpareInits: defaults.SpareInits})
	if !st.Runtime.HasSteward() {
		b.Skip("skipping: spare inits need the steward's C init")
	}
	during, err := New(context.Background(), st.Runtime, st.Store, st.Log, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { during.Close(context.Background()) })
	after, err := New(context.Background(), unnamedRuntime{st.Runtime}, st.Store, st.Log, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { after.Close(context.Background()) })
	ready := func() {
		deadline := time.Now().Add(30 * time.Second)
		for st.Runtime.SpareInitsIdle() < defaults.SpareInits || st.Runtime.SparesIdle() < defaults.SpareInits {
			if time.Now().After(deadline) {
				b.Fatal("spares not ready after 30s")
			}
			time.Sleep(time.Millisecond)
		}
	}
	ctx := context.Background()
	createOn := func(m *Manager) time.Duration {
		ready()
		start := time.Now()
		in, err := m.Create(ctx, "agent", CreateRequest{})
		d := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Destroy(ctx, "agent", in.ID); err != nil {
			b.Fatal(err)
		}
		return d
	}
	var with, without []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		with = append(with, createOn(during))
		b.StopTimer()
		without = append(without, createOn(after))
		b.StartTimer()
	}
	b.StopTimer()
	reportPair(b, with, without)
}

// unpreparedRuntime's sandboxes hide PrepareExec: their execs are readied
// after the intent commits.
type unpreparedRuntime struct{ sandbox.Runtime }

func (r unpreparedRuntime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := r.Runtime.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return struct{ sandbox.Sandbox }{sb}, nil
}

// BenchmarkExecPrepared: Manager.Exec of `true`, back to back, each
// iteration once in a sandbox whose exec is readied while its intent
// commits (PrepareExec) and once, on the same runtime and log, in one
// whose exec is readied after (after-p50-ms).
func BenchmarkExecPrepared(b *testing.B) {
	st := stack.New(b, native.Options{})
	during, err := New(context.Background(), st.Runtime, st.Store, st.Log, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { during.Close(context.Background()) })
	after, err := New(context.Background(), unpreparedRuntime{unnamedRuntime{st.Runtime}}, st.Store, st.Log, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { after.Close(context.Background()) })
	ctx := context.Background()
	a, err := during.Create(ctx, "agent", CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	c, err := after.Create(ctx, "agent", CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	argv := sandbox.ExecRequest{Argv: []string{"true"}}
	execOn := func(m *Manager, id string) time.Duration {
		start := time.Now()
		if _, err := m.Exec(ctx, "agent", id, argv); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var with, without []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		with = append(with, execOn(during, a.ID))
		b.StopTimer()
		without = append(without, execOn(after, c.ID))
		b.StartTimer()
	}
	b.StopTimer()
	reportPair(b, with, without)
}

// reportPair reports p50 and p99 of with, and the peer's p50 and the
// difference of the two p50s (after-p50-ms, saved-p50-ms).
func reportPair(b *testing.B, with, without []time.Duration) {
	slices.Sort(with)
	slices.Sort(without)
	q := func(d []time.Duration, p float64) float64 {
		return float64(d[min(len(d)-1, int(p*float64(len(d))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(with, 0.5), "p50-ms")
	b.ReportMetric(q(with, 0.99), "p99-ms")
	b.ReportMetric(q(without, 0.5), "after-p50-ms")
	b.ReportMetric(q(without, 0.5)-q(with, 0.5), "saved-p50-ms")
}
