package setup

import "testing"

// BenchmarkCompileEncode is the host's per-create work for the C init:
// compiling a default sandbox's config into its plan and encoding it.
func BenchmarkCompileEncode(b *testing.B) {
	cfg := defaultConfig(b)
	c, err := NewCompiler(4)
	if err != nil {
		b.Fatal(err)
	}
	var size, steps int
	b.ReportAllocs()
	for b.Loop() {
		p, err := c.Compile(cfg, 3)
		if err != nil {
			b.Fatal(err)
		}
		out, err := Encode(p, FlagWorkloadTasks)
		if err != nil {
			b.Fatal(err)
		}
		size, steps = len(out), len(p.Root)+len(p.Seal)
	}
	b.ReportMetric(float64(size), "plan-bytes")
	b.ReportMetric(float64(steps), "steps")
}
