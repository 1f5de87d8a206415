package oci_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
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
// (`true`), per runtime; teardown is outside the timer.
func BenchmarkCreateToFirstExec(b *testing.B) {
	for _, name := range runtimeNames {
		b.Run(name, func(b *testing.B) {
			r := runtimeFor(b, name)
			ctx := context.Background()
			var ds []time.Duration
			for i := 0; i < b.N; i++ {
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
		})
	}
}

// BenchmarkExecRoundTrip: one `true` in a running sandbox, per runtime.
func BenchmarkExecRoundTrip(b *testing.B) {
	for _, name := range runtimeNames {
		b.Run(name, func(b *testing.B) {
			r := runtimeFor(b, name)
			ctx := context.Background()
			sb, err := r.Create(ctx, sandbox.Spec{})
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Destroy(ctx)
			var ds []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}})
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("exec: %v %+v", err, res)
				}
				ds = append(ds, time.Since(start))
			}
			reportPercentiles(b, ds)
		})
	}
}
