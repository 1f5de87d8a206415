package modelproxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/modelproxy/mock"
)

func benchPost(b *testing.B, c *http.Client, url, tok, body string) time.Duration {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
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
// proxy with the same request sent straight to the same local upstream, in
// the same run: the upstream is the recorder stand-in or the mock provider
// served over loopback, and the proxy runs without budgets or with both
// budgets (reserve, output bound, settle). ratio is p50 proxied / p50
// direct.
func BenchmarkProxyOverhead(b *testing.B) {
	for _, c := range []struct {
		name    string
		mock    bool
		budgets bool
	}{
		{"recorder", false, false},
		{"mock", true, false},
		{"mock-budgets", true, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			var ms *httptest.Server
			if c.mock {
				ms = httptest.NewServer(mock.New(nil).OpenAI())
				defer ms.Close()
			}
			e := setup(b, func(cfg *Config) {
				cfg.Logf = nil
				if ms != nil {
					cfg.OpenAI = &Upstream{BaseURL: ms.URL + "/v1", APIKey: openaiKey}
				}
				if c.budgets {
					cfg.SandboxBudget, cfg.PrincipalBudget = 1<<50, 1<<50
				}
			})
			up := e.oaS.URL
			if ms != nil {
				up = ms.URL
			}
			tok := mint(b, e.p, "s")
			body := `{"model":"m","messages":[{"role":"user","content":"hello there"}]}`
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
			direct, proxied := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
			for i := 0; i < 10; i++ { // warm connections
				benchPost(b, c, up+"/v1/chat/completions", tok, body)
				benchPost(b, c, e.srv.URL+"/openai/v1/chat/completions", tok, body)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				direct = append(direct, benchPost(b, c, up+"/v1/chat/completions", tok, body))
				proxied = append(proxied, benchPost(b, c, e.srv.URL+"/openai/v1/chat/completions", tok, body))
			}
			b.StopTimer()
			slices.Sort(direct)
			slices.Sort(proxied)
			d, p := direct[len(direct)/2], proxied[len(proxied)/2]
			b.ReportMetric(float64(d.Microseconds())/1000, "p50-direct-ms")
			b.ReportMetric(float64(p.Microseconds())/1000, "p50-proxy-ms")
			b.ReportMetric(float64((p-d).Microseconds())/1000, "overhead-ms")
			b.ReportMetric(float64(p)/float64(d), "ratio")
		})
	}
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
			benchPost(b, c, url, tok, `{"model":"m","messages":[]}`)
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
