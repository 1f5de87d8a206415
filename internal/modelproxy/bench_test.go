package modelproxy

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/modelproxy/mock"
)

// benchBody is a request the size of a typical agent turn: a system
// prompt, a few messages and one tool schema (about 2 KiB).
var benchBody = `{"model":"m","messages":[{"role":"system","content":"` + strings.Repeat("You are a careful coding agent. ", 24) +
	`"},{"role":"user","content":"List the files in the repository and summarise what each package does."},` +
	`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"shell","arguments":"{\"cmd\":\"ls -R\"}"}}]},` +
	`{"role":"tool","tool_call_id":"call_1","content":"` + strings.Repeat("internal/pkg/file.go ", 30) + `"}],` +
	`"tools":[{"type":"function","function":{"name":"shell","description":"Run a shell command in the sandbox.",` +
	`"parameters":{"type":"object","properties":{"cmd":{"type":"string","description":"the command"},"timeout":{"type":"integer"}},"required":["cmd"]}}}],` +
	`"temperature":0.2%s}`

const benchJSONReply = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"Here is the summary."},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":512,"completion_tokens":7,"total_tokens":519}}`

// benchSSEReply is a chat stream asked for usage, as OpenAI sends it:
// "usage":null in every chunk but the last.
var benchSSEReply = "data: {\"choices\":[{\"delta\":{\"content\":\"Here\"}}],\"usage\":null}\n\n" +
	"data: {\"choices\":[{\"delta\":{\"content\":\" is\"}}],\"usage\":null}\n\n" +
	"data: {\"choices\":[{\"delta\":{\"content\":\" the summary.\"}}],\"usage\":null}\n\n" +
	"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":512,\"completion_tokens\":3}}\n\n" +
	"data: [DONE]\n\n"

// benchUpstream is a stand-in provider that keeps nothing per request (the
// recorder's history would grow through a benchmark): it reads the body and
// answers a chat completion, as JSON or, when the body asks, as a stream.
func benchUpstream(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	if strings.Contains(string(b), `"stream":true`) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, benchSSEReply)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, benchJSONReply)
}

func benchPost(b *testing.B, c *http.Client, url, tok, body string) time.Duration {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
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

// quantile returns the q-quantile of sorted d.
func quantile(d []time.Duration, q float64) time.Duration {
	return d[min(len(d)-1, int(float64(len(d))*q))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkProxyOverhead measures what a sandbox feels: the same request
// (same body, same headers, same client and connection pool) sent through
// a sandbox's proxy (SandboxHandler with that sandbox's token, over
// loopback) and straight to the same upstream, interleaved in the same
// run, so machine noise lands on both. It reports p50 and p99 of each and
// p50-overhead-ms = p50 proxied - p50 direct (p99-overhead-ms likewise).
//
//	json     a JSON completion from a stand-in provider (usage read from the body)
//	budgets  the same with sandbox and principal budgets (reserve, output bound, settle)
//	sse      a streamed completion; the client did not ask for usage, so the
//	         proxy asks for it and strips the usage chunk again
//	mock     the repository's mock provider as the upstream
func BenchmarkProxyOverhead(b *testing.B) {
	for _, c := range []struct {
		name    string
		mock    bool
		budgets bool
		extra   string // appended to benchBody
	}{
		{"json", false, false, ""},
		{"budgets", false, true, ""},
		{"sse", false, false, `,"stream":true`},
		{"mock", true, false, ""},
	} {
		b.Run(c.name, func(b *testing.B) {
			var up *httptest.Server
			if c.mock {
				up = httptest.NewServer(mock.New(nil).OpenAI())
			} else {
				up = httptest.NewServer(http.HandlerFunc(benchUpstream))
			}
			defer up.Close()
			p, err := New(Config{OpenAI: &Upstream{BaseURL: up.URL + "/v1", APIKey: openaiKey}})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			if c.budgets {
				p.cfg.SandboxBudget, p.cfg.PrincipalBudget = 1<<50, 1<<50
			}
			tok, err := p.MintSandbox("s", "agent")
			if err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(p.SandboxHandler("s"))
			defer srv.Close()
			body := strings.Replace(benchBody, "%s", c.extra, 1)
			viaProxy, direct := srv.URL+"/openai/v1/chat/completions", up.URL+"/v1/chat/completions"
			cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
			defer cl.CloseIdleConnections()
			for i := 0; i < 20; i++ { // warm both connection pools
				benchPost(b, cl, direct, tok, body)
				benchPost(b, cl, viaProxy, tok, body)
			}
			ds, ps := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// Alternate which goes first, so neither always runs on a
				// cache the other just warmed.
				if i%2 == 0 {
					ds = append(ds, benchPost(b, cl, direct, tok, body))
					ps = append(ps, benchPost(b, cl, viaProxy, tok, body))
				} else {
					ps = append(ps, benchPost(b, cl, viaProxy, tok, body))
					ds = append(ds, benchPost(b, cl, direct, tok, body))
				}
			}
			b.StopTimer()
			slices.Sort(ds)
			slices.Sort(ps)
			d50, p50, d99, p99 := quantile(ds, .5), quantile(ps, .5), quantile(ds, .99), quantile(ps, .99)
			b.ReportMetric(ms(d50), "p50-direct-ms")
			b.ReportMetric(ms(p50), "p50-proxy-ms")
			b.ReportMetric(ms(p50-d50), "p50-overhead-ms")
			b.ReportMetric(ms(d99), "p99-direct-ms")
			b.ReportMetric(ms(p99), "p99-proxy-ms")
			b.ReportMetric(ms(p99-d99), "p99-overhead-ms")
			b.ReportMetric(float64(p50)/float64(d50), "p50-ratio")
		})
	}
}

// BenchmarkProxyPath is the proxy's own per-request cost, for -cpuprofile
// and -memprofile: only proxied requests, so the profile is not half the
// direct peer's. (The peer comparison is BenchmarkProxyOverhead.)
func BenchmarkProxyPath(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(benchUpstream))
	defer up.Close()
	p, err := New(Config{OpenAI: &Upstream{BaseURL: up.URL + "/v1", APIKey: openaiKey}})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	tok, _ := p.MintSandbox("s", "agent")
	srv := httptest.NewServer(p.SandboxHandler("s"))
	defer srv.Close()
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer cl.CloseIdleConnections()
	body := strings.Replace(benchBody, "%s", "", 1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		benchPost(b, cl, srv.URL+"/openai/v1/chat/completions", tok, body)
	}
}

// BenchmarkProxyRPS measures parallel requests per second through the proxy
// and straight to the same upstream in the same run (ratio = proxied /
// direct).
func BenchmarkProxyRPS(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(benchUpstream))
	defer up.Close()
	p, err := New(Config{OpenAI: &Upstream{BaseURL: up.URL + "/v1", APIKey: openaiKey}})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	tok, _ := p.MintSandbox("s", "agent")
	srv := httptest.NewServer(p.SandboxHandler("s"))
	defer srv.Close()
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer cl.CloseIdleConnections()
	body := strings.Replace(benchBody, "%s", "", 1)
	rps := func(url string) float64 {
		t0 := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				benchPost(b, cl, url, tok, body)
			}
		})
		return float64(b.N) / time.Since(t0).Seconds()
	}
	b.ResetTimer()
	d := rps(up.URL + "/v1/chat/completions")
	pr := rps(srv.URL + "/openai/v1/chat/completions")
	b.ReportMetric(d, "direct-req/s")
	b.ReportMetric(pr, "proxy-req/s")
	b.ReportMetric(pr/d, "ratio")
}

// BenchmarkTimeToFirstByte measures how long the first SSE event takes to
// reach the client through the proxy, with the upstream holding the stream
// open until the client has it (a proxy that buffered would never
// finish: the upstream waits for the client).
func BenchmarkTimeToFirstByte(b *testing.B) {
	got := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-got:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer up.Close()
	p, err := New(Config{OpenAI: &Upstream{BaseURL: up.URL + "/v1", APIKey: openaiKey}})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	tok, _ := p.MintSandbox("s", "agent")
	srv := httptest.NewServer(p.SandboxHandler("s"))
	defer srv.Close()
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer cl.CloseIdleConnections()
	ttfb := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req, _ := http.NewRequest("POST", srv.URL+"/openai/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		t0 := time.Now()
		resp, err := cl.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		if _, err := br.ReadString('\n'); err != nil {
			b.Fatal(err)
		}
		ttfb = append(ttfb, time.Since(t0))
		got <- struct{}{}
		io.Copy(io.Discard, br)
		resp.Body.Close()
	}
	b.StopTimer()
	slices.Sort(ttfb)
	b.ReportMetric(ms(quantile(ttfb, .5)), "p50-ttfb-ms")
	b.ReportMetric(ms(quantile(ttfb, .99)), "p99-ttfb-ms")
}
