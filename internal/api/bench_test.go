package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/session"
)

// The latency benchmarks measure their peers in the same run, interleaved
// iteration by iteration, so that the overhead they report is a difference
// taken under the same load (the machine is shared and noisy):
//
//   - host: a plain fork+exec of the same `true` on the host (os/exec),
//     the floor an exec in a sandbox cannot beat;
//   - manager: the same operation through session.Manager in process, so
//     the difference to it is what HTTP adds;
//   - runtime: for creates, the runtime's Create and Exec alone, so the
//     difference to it is what the session layer (store row, audit
//     records, quotas) and HTTP add.
//
// Each reports p50 and p99 in milliseconds for itself (p50-ms, p99-ms)
// and p50 for each peer (host-p50-ms, ...), and over-host-p50-ms or
// over-runtime-p50-ms: its p50 minus the peer's.

// samples collects the latencies of one path.
type samples []time.Duration

func (s samples) quantile(q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	d := slices.Clone(s)
	slices.Sort(d)
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func reportPercentiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	b.ReportMetric(ms(samples(d).quantile(0.50)), "p50-ms")
	b.ReportMetric(ms(samples(d).quantile(0.99)), "p99-ms")
}

// reportPeer reports a peer's p50 as name-p50-ms and the difference of the
// measured path's p50 to it as over-name-p50-ms.
func reportPeer(b *testing.B, name string, own, peer samples) {
	b.ReportMetric(ms(peer.quantile(0.50)), name+"-p50-ms")
	b.ReportMetric(ms(own.quantile(0.50)-peer.quantile(0.50)), "over-"+name+"-p50-ms")
}

// bareHTTP returns a func that makes one keep-alive POST round trip over
// loopback to a bare net/http server whose handler reads the body and
// answers a small JSON object, and returns how long it took: what any Go
// HTTP API pays for a request on this machine in the same moment,
// whatever it does. On a guest whose idle vCPUs halt, it is far above
// its back-to-back cost (about 20 us here) whenever the request follows
// a pause, however short (docs/performance.md).
func bareHTTP(b *testing.B) func() time.Duration {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"exit":0,"stdout":"","stderr":""}`)
	}))
	b.Cleanup(ts.Close)
	client := &http.Client{Transport: &http.Transport{}}
	b.Cleanup(client.CloseIdleConnections)
	round := func() time.Duration {
		start := time.Now()
		resp, err := client.Post(ts.URL+"/x", "application/json", strings.NewReader(`{"argv":["true"]}`))
		if err != nil {
			b.Fatal(err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	round() // the connection, kept alive
	return round
}

// BenchmarkBareHTTPAfterIdle is bareHTTP's round trip alone, after the
// process has been idle for gap: the part of every API number that is
// the machine's, not the API's. gap=0 is back to back; a request after a
// pause waits for halted vCPUs to wake (docs/performance.md). Its ns/op
// includes the gap; p50-ms is the round trip's.
func BenchmarkBareHTTPAfterIdle(b *testing.B) {
	for _, gap := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond} {
		b.Run("gap="+gap.String(), func(b *testing.B) {
			round := bareHTTP(b)
			times := make(samples, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// Not b.StopTimer: it reads the memory statistics, which
				// stops the world just before the request.
				time.Sleep(gap)
				times = append(times, round())
			}
			b.StopTimer()
			reportPercentiles(b, times)
		})
	}
}

// reportAPILayer reports what the API's own layer adds to the in-process
// manager's path beyond the bare HTTP round trips it needs (requests of
// them), measured in the same iterations: p50 of own, less the manager's
// p50 and requests times the bare round trip's p50, as api-layer-p50-ms.
func reportAPILayer(b *testing.B, own, mgr, bare samples, requests int) {
	reportPeer(b, "bare-http", own, bare)
	b.ReportMetric(ms(own.quantile(0.50)-mgr.quantile(0.50)-time.Duration(requests)*bare.quantile(0.50)), "api-layer-p50-ms")
}

// post is a request as an SDK sends it, without the tests' check of the
// answer against the API's description (env.req), which is client-side
// work no SDK does; the benchmarks check the first answer with env.req,
// untimed.
func (e *env) post(b *testing.B, path, body string) (int, []byte) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r, err := http.NewRequest("POST", e.ts.URL+path, rd)
	if err != nil {
		b.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+agentTok)
	resp, err := e.client.Do(r)
	if err != nil {
		b.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatalf("POST %s: %v", path, err)
	}
	return resp.StatusCode, out
}

// hostTrue returns a func that runs the host's `true` (the binary the
// sandbox runs for ["true"]: the native root is built from the host's
// directories) with a plain fork+exec and returns how long that took.
func hostTrue(b *testing.B) func() time.Duration {
	path, err := exec.LookPath("true")
	if err != nil {
		b.Skipf("no true on the host: %v", err)
	}
	return func() time.Duration {
		start := time.Now()
		if err := exec.Command(path).Run(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
}

// BenchmarkHostForkExec is the floor on its own: os/exec of the host's true.
func BenchmarkHostForkExec(b *testing.B) {
	run := hostTrue(b)
	run()
	times := make(samples, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		times = append(times, run())
	}
	b.StopTimer()
	reportPercentiles(b, times)
}

// BenchmarkHTTPExecRoundTrip: POST exec?wait=1 of ["true"] into one running
// sandbox, over loopback HTTP with keep-alive; peers (same sandbox, same
// iteration): the manager's Exec in process, a bare HTTP round trip
// (bareHTTP; with the manager's, it leaves api-layer-p50-ms, what the
// API's own code adds) and the host's fork+exec.
func BenchmarkHTTPExecRoundTrip(b *testing.B) {
	e := newEnv(b, envOpts{})
	s := e.create(nil)
	body := `{"argv":["true"]}`
	path := "/v1/sandboxes/" + s.ID + "/exec?wait=1"
	host := hostTrue(b)
	bare := bareHTTP(b)
	e.execWait(s.ID, body) // warm the connection
	host()
	times := make(samples, 0, b.N)
	var mgr, bareTimes, hostTimes samples
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		code, out := e.post(b, path, body)
		times = append(times, time.Since(start))
		if code != http.StatusOK {
			b.Fatalf("exec: %d %s", code, out)
		}
		b.StopTimer()
		mgr = append(mgr, managerExec(b, e, s.ID))
		bareTimes = append(bareTimes, bare())
		hostTimes = append(hostTimes, host())
		b.StartTimer()
	}
	b.StopTimer()
	reportPercentiles(b, times)
	reportPeer(b, "manager", times, mgr)
	reportAPILayer(b, times, mgr, bareTimes, 1)
	reportPeer(b, "host", times, hostTimes)
}

func managerExec(b *testing.B, e *env, id string) time.Duration {
	start := time.Now()
	if _, err := e.m.Exec(b.Context(), "agent", id, sandbox.ExecRequest{Argv: []string{"true"}}); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkManagerExecRoundTrip is the same exec without HTTP, with the
// host's fork+exec as its peer.
func BenchmarkManagerExecRoundTrip(b *testing.B) {
	e := newEnv(b, envOpts{})
	s := e.create(nil)
	host := hostTrue(b)
	host()
	times := make(samples, 0, b.N)
	var hostTimes samples
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		times = append(times, managerExec(b, e, s.ID))
		b.StopTimer()
		hostTimes = append(hostTimes, host())
		b.StartTimer()
	}
	b.StopTimer()
	reportPercentiles(b, times)
	reportPeer(b, "host", times, hostTimes)
}

// BenchmarkHTTPCreateFirstExec: POST /v1/sandboxes then the first exec
// (?wait=1 of ["true"]), timed together, cold (no pool) and pooled (the
// runtime's warm pool, PoolSize 2, as the daemon runs it by default; each
// create waits, untimed, for the pool to be full again). Peers, in the
// same iteration: the manager's Create and Exec in process, and the
// runtime's Create and Exec alone. DELETEs are outside the timer.
//
// The one-request cases send the command with the create (POST
// /v1/sandboxes with "exec", its answer a stream read to its end) and
// time that one request, with the two requests as a peer in the same
// iteration (two-requests-p50-ms).
//
// A bare HTTP round trip (bareHTTP), after the same wait for the pool, is
// a peer too (bare-http-p50-ms); the two-request cases report
// api-layer-p50-ms against the manager's two calls and two of them.
func BenchmarkHTTPCreateFirstExec(b *testing.B) {
	b.Run("cold", func(b *testing.B) { benchCreateFirstExec(b, 0, false, false) })
	b.Run("cold-spares", func(b *testing.B) { benchCreateFirstExec(b, 0, true, false) })
	b.Run("cold-spares-one-request", func(b *testing.B) { benchCreateFirstExec(b, 0, true, true) })
	b.Run("pooled", func(b *testing.B) { benchCreateFirstExec(b, 2, false, false) })
	b.Run("pooled-one-request", func(b *testing.B) { benchCreateFirstExec(b, 2, false, true) })
}

// benchCreateFirstExec: with spares, a cold create as the daemon makes one
// when its pool is empty (or the spec is not the pool's), its spare
// cgroups and inits ready (native.Options.SpareCgroups, SpareInits).
func benchCreateFirstExec(b *testing.B, poolSize int, spares, oneRequest bool) {
	o := envOpts{poolSize: poolSize}
	if spares {
		o.spareCgroups, o.spareInits = defaults.SpareInits, defaults.SpareInits
	}
	e := newEnv(b, o)
	waitPool := func() {
		deadline := time.Now().Add(30 * time.Second)
		for e.rt.PoolIdle() < poolSize || e.rt.SparesIdle() < o.spareCgroups || e.rt.SpareInitsIdle() < o.spareInits {
			if time.Now().After(deadline) {
				b.Fatalf("pool has %d of %d, spare cgroups %d of %d, spare inits %d of %d after 30s",
					e.rt.PoolIdle(), poolSize, e.rt.SparesIdle(), o.spareCgroups, e.rt.SpareInitsIdle(), o.spareInits)
			}
			time.Sleep(time.Millisecond)
		}
	}
	ctx := context.Background()
	argv := sandbox.ExecRequest{Argv: []string{"true"}}
	// One create and exec checked against the API's description, untimed.
	waitPool()
	first := e.create(nil)
	e.execWait(first.ID, `{"argv":["true"]}`)
	e.must(http.StatusOK, "DELETE", "/v1/sandboxes/"+first.ID, agentTok, nil, nil)
	bare := bareHTTP(b)
	times := make(samples, 0, b.N)
	var mgr, rt, twoRequests, bareTimes samples
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		waitPool()
		b.StartTimer()
		measured := createThenExec
		if oneRequest {
			measured = createWithExec
		}
		id, d := measured(b, e)
		times = append(times, d)
		b.StopTimer()
		e.must(http.StatusOK, "DELETE", "/v1/sandboxes/"+id, agentTok, nil, nil)
		if oneRequest {
			// The two requests, as a peer in the same iteration.
			waitPool()
			id, d = createThenExec(b, e)
			twoRequests = append(twoRequests, d)
			e.must(http.StatusOK, "DELETE", "/v1/sandboxes/"+id, agentTok, nil, nil)
		}

		waitPool()
		bareTimes = append(bareTimes, bare())

		waitPool()
		start := time.Now()
		info, err := e.m.Create(ctx, "agent", session.CreateRequest{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.m.Exec(ctx, "agent", info.ID, argv); err != nil {
			b.Fatal(err)
		}
		mgr = append(mgr, time.Since(start))
		if err := e.m.Destroy(ctx, "agent", info.ID); err != nil {
			b.Fatal(err)
		}

		waitPool()
		start = time.Now()
		sb, err := e.rt.Create(ctx, sandbox.Spec{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := sb.Exec(ctx, argv); err != nil {
			b.Fatal(err)
		}
		rt = append(rt, time.Since(start))
		if err := sb.Destroy(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	reportPercentiles(b, times)
	reportPeer(b, "manager", times, mgr)
	reportPeer(b, "runtime", times, rt)
	if oneRequest {
		reportPeer(b, "two-requests", times, twoRequests)
		reportPeer(b, "bare-http", times, bareTimes)
	} else {
		reportAPILayer(b, times, mgr, bareTimes, 2)
	}
}

// createThenExec is POST /v1/sandboxes, then the first exec (?wait=1 of
// ["true"]): the sandbox's id and how long the two took.
func createThenExec(b *testing.B, e *env) (string, time.Duration) {
	start := time.Now()
	code, out := e.post(b, "/v1/sandboxes", "")
	if code != http.StatusCreated {
		b.Fatalf("create: %d %s", code, out)
	}
	var s sbx
	if err := json.Unmarshal(out, &s); err != nil {
		b.Fatal(err)
	}
	code, out = e.post(b, "/v1/sandboxes/"+s.ID+"/exec?wait=1", `{"argv":["true"]}`)
	d := time.Since(start)
	if code != http.StatusOK {
		b.Fatalf("exec: %d %s", code, out)
	}
	return s.ID, d
}

// createWithExec is the same in one request: POST /v1/sandboxes with
// "exec", its stream read to its end.
func createWithExec(b *testing.B, e *env) (string, time.Duration) {
	start := time.Now()
	code, out := e.post(b, "/v1/sandboxes", `{"exec":{"argv":["true"]}}`)
	d := time.Since(start)
	first, rest, _ := strings.Cut(string(out), "\n")
	var f wire.CreatedFrame
	if code != http.StatusCreated || json.Unmarshal([]byte(first), &f) != nil || !strings.Contains(rest, `"exit":0`) {
		b.Fatalf("create with exec: %d %s", code, out)
	}
	return f.Sandbox.ID, d
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
