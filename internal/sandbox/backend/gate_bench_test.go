package backend_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// benchGate is a realistic gate: network tools, most of which a host view
// has. The gated benchmarks add `true` itself for the approved run.
var benchGate = []string{"curl", "wget", "ssh", "scp", "nc", "socat", "telnet", "ftp"}

func p50(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkGateExec: the exec round trip of `true` into a sandbox without
// a gate, into one with a gate (true is not gated: the cost the gate adds
// to every ungated exec), and an approved run of a gated `true` (the pid 1
// copy of the real program, and on the container backends the agent's
// start). Interleaved in one loop, reported as ratios of p50s.
func BenchmarkGateExec(b *testing.B) {
	for _, name := range backends() {
		b.Run(name, func(b *testing.B) {
			rt := open(b, name)
			ctx := context.Background()
			mk := func(gate []string) sandbox.Sandbox {
				sb, err := rt.Create(ctx, sandbox.Spec{Gate: gate})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { sb.Destroy(context.Background()) })
				return sb
			}
			plain, gated := mk(nil), mk(append(slices.Clone(benchGate), "true"))
			withGate := mk(benchGate)
			run := func(sb sandbox.Sandbox, gate string) time.Duration {
				start := time.Now()
				res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}, Gate: gate})
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("exec: %v %+v", err, res)
				}
				return time.Since(start)
			}
			var base, ungated, approved []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				base = append(base, run(plain, ""))
				ungated = append(ungated, run(withGate, ""))
				approved = append(approved, run(gated, "true"))
			}
			b.StopTimer()
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			b.ReportMetric(ms(p50(base)), "nogate-p50-ms")
			b.ReportMetric(float64(p50(ungated))/float64(p50(base)), "gated-sandbox/nogate")
			b.ReportMetric(float64(p50(approved))/float64(p50(base)), "approved-run/nogate")
		})
	}
}

// BenchmarkGateCreate: create to the first exec's result without a gate
// and with one (resolving the gated programs in the root and masking them
// at start), interleaved, as a ratio of p50s.
func BenchmarkGateCreate(b *testing.B) {
	for _, name := range backends() {
		b.Run(name, func(b *testing.B) {
			rt := open(b, name)
			ctx := context.Background()
			once := func(gate []string) time.Duration {
				start := time.Now()
				sb, err := rt.Create(ctx, sandbox.Spec{Gate: gate})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}}); err != nil {
					b.Fatal(err)
				}
				d := time.Since(start)
				sb.Destroy(ctx)
				return d
			}
			once(benchGate) // the first resolution of a root searches for hard links; later ones use the cache
			var base, gated []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				base = append(base, once(nil))
				gated = append(gated, once(benchGate))
			}
			b.StopTimer()
			b.ReportMetric(float64(p50(base).Microseconds())/1000, "nogate-p50-ms")
			b.ReportMetric(float64(p50(gated))/float64(p50(base)), "gate/nogate")
		})
	}
}
