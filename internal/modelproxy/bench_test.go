package modelproxy

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

func benchPost(b *testing.B, c *http.Client, url, tok string) time.Duration {
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"model":"m","messages":[]}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatal(resp.Status)
	}
	return time.Since(t0)
}

// BenchmarkProxyOverhead compares the p50 latency of a request through the
// proxy with the same request sent straight to the same local upstream.
func BenchmarkProxyOverhead(b *testing.B) {
	e := setup(b, func(c *Config) { c.Logf = nil })
	tok := mint(b, e.p, "s")
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	direct, proxied := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	for i := 0; i < 10; i++ { // warm connections
		benchPost(b, c, e.oaS.URL+"/v1/chat/completions", tok)
		benchPost(b, c, e.srv.URL+"/openai/v1/chat/completions", tok)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		direct = append(direct, benchPost(b, c, e.oaS.URL+"/v1/chat/completions", tok))
		proxied = append(proxied, benchPost(b, c, e.srv.URL+"/openai/v1/chat/completions", tok))
	}
	b.StopTimer()
	slices.Sort(direct)
	slices.Sort(proxied)
	d, p := direct[len(direct)/2], proxied[len(proxied)/2]
	b.ReportMetric(float64(d.Microseconds())/1000, "p50-direct-ms")
	b.ReportMetric(float64(p.Microseconds())/1000, "p50-proxy-ms")
	b.ReportMetric(float64((p-d).Microseconds())/1000, "overhead-ms")
}

// BenchmarkProxyRPS measures parallel requests per second through the proxy
// to a trivial upstream.
func BenchmarkProxyRPS(b *testing.B) {
	e := setup(b, func(c *Config) { c.Logf = nil })
	tok := mint(b, e.p, "s")
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	url := e.srv.URL + "/openai/v1/chat/completions"
	b.ResetTimer()
	t0 := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			benchPost(b, c, url, tok)
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "req/s")
}

// BenchmarkTimeToFirstByte measures how long the first SSE event takes to
// reach the client through the proxy, with the upstream holding the stream
// open afterwards.
func BenchmarkTimeToFirstByte(b *testing.B) {
	e := setup(b, func(c *Config) { c.Logf = nil })
	e.oa.handle = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
		w.(http.Flusher).Flush()
		time.Sleep(2 * time.Millisecond)
		io.WriteString(w, "data: [DONE]\n\n")
	}
	tok := mint(b, e.p, "s")
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	ttfb := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req, _ := http.NewRequest("POST", e.srv.URL+"/openai/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		t0 := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 1)
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			b.Fatal(err)
		}
		ttfb = append(ttfb, time.Since(t0))
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	b.StopTimer()
	slices.Sort(ttfb)
	b.ReportMetric(float64(ttfb[len(ttfb)/2].Microseconds())/1000, "p50-ttfb-ms")
}
