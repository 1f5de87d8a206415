package api

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/defaults"

	"github.com/ironclaw/ironclaw/internal/sandbox"
)

func reportPercentiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	at := func(q float64) float64 {
		return float64(d[min(len(d)-1, int(q*float64(len(d))))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

// BenchmarkHTTPExecRoundTrip: POST exec?wait=1 of ["true"] into one running
// sandbox, over loopback HTTP with keep-alive.
func BenchmarkHTTPExecRoundTrip(b *testing.B) {
	e := newEnv(b, envOpts{})
	s := e.create(nil)
	body := `{"argv":["true"]}`
	path := "/v1/sandboxes/" + s.ID + "/exec?wait=1"
	e.execWait(s.ID, body) // warm the connection
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		resp, out := e.req("POST", path, agentTok, body)
		times = append(times, time.Since(start))
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("exec: %d %s", resp.StatusCode, out)
		}
	}
	b.StopTimer()
	reportPercentiles(b, times)
}

// BenchmarkHTTPCreateFirstExec: POST /v1/sandboxes then the first exec
// (?wait=1 of ["true"]), timed together; the DELETE and the wait for the
// runtime's warm pool (PoolSize 2) to refill are outside the timer, so
// this measures the warm-pool path, as a daemon with a pool runs it.
func BenchmarkHTTPCreateFirstExec(b *testing.B) {
	e := newEnv(b, envOpts{poolSize: 2})
	waitPool := func() {
		deadline := time.Now().Add(30 * time.Second)
		for e.rt.PoolIdle() < 2 {
			if time.Now().After(deadline) {
				b.Fatalf("pool has %d of 2 after 30s", e.rt.PoolIdle())
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		waitPool()
		b.StartTimer()
		start := time.Now()
		resp, out := e.req("POST", "/v1/sandboxes", agentTok, nil)
		if resp.StatusCode != http.StatusCreated {
			b.Fatalf("create: %d %s", resp.StatusCode, out)
		}
		var s sbx
		if err := json.Unmarshal(out, &s); err != nil {
			b.Fatal(err)
		}
		resp, out = e.req("POST", "/v1/sandboxes/"+s.ID+"/exec?wait=1", agentTok, `{"argv":["true"]}`)
		times = append(times, time.Since(start))
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("exec: %d %s", resp.StatusCode, out)
		}
		b.StopTimer()
		e.must(http.StatusOK, "DELETE", "/v1/sandboxes/"+s.ID, agentTok, nil, nil)
		b.StartTimer()
	}
	b.StopTimer()
	reportPercentiles(b, times)
}

// BenchmarkManagerExecRoundTrip is the same exec without HTTP, to show
// what the API layer adds to BenchmarkHTTPExecRoundTrip.
func BenchmarkManagerExecRoundTrip(b *testing.B) {
	e := newEnv(b, envOpts{})
	s := e.create(nil)
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := e.m.Exec(b.Context(), "agent", s.ID, sandbox.ExecRequest{Argv: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, times)
}

// BenchmarkHTTPFileReadRate: as many small file reads (GET files of a
// 1 KiB file) as one client can push at one sandbox, 32 at a time over
// loopback with keep-alive, under the default rate limits. It reports the
// rate reached and how many reads met a 429: the defaults are meant to be
// out of reach of one client on one sandbox (docs/http-api.md).
func BenchmarkHTTPFileReadRate(b *testing.B) {
	e := newEnv(b, envOpts{cfg: Config{
		RatePerSecond: rateOr(defaults.RatePerSecond), RateBurst: defaults.RateBurst,
		SandboxRatePerSecond: rateOr(defaults.SandboxRatePerSecond), SandboxRateBurst: defaults.SandboxRateBurst,
	}})
	s := e.create(nil)
	e.must(http.StatusNoContent, "PUT", "/v1/sandboxes/"+s.ID+"/files?path=/workspace/a", agentTok, strings.Repeat("x", 1024), nil)
	url := e.ts.URL + "/v1/sandboxes/" + s.ID + "/files?path=/workspace/a"
	var limited atomic.Int64
	b.SetParallelism(32 / max(1, runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("GET", url, nil)
			req.Header.Set("Authorization", "Bearer "+agentTok)
			resp, err := e.client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusTooManyRequests:
				limited.Add(1)
			case resp.StatusCode != http.StatusOK || len(out) != 1024:
				b.Errorf("read: %d %d bytes", resp.StatusCode, len(out))
				return
			}
		}
	})
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "req/s")
	b.ReportMetric(float64(limited.Load()), "429s")
}

// rateOr is def, or with IRONCLAW_BENCH_UNLIMITED=1 a rate nothing meets
// (to measure what the route does without a limit).
func rateOr(def float64) float64 {
	if os.Getenv("IRONCLAW_BENCH_UNLIMITED") == "1" {
		return 1e9
	}
	return def
}
